package master

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// adminDo sends one request to h and returns the status and body.
func adminDo(t *testing.T, base, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitDrainJob polls the job until it leaves RUNNING (10 s bound).
func waitDrainJob(t *testing.T, base, id string) DrainJobStatus {
	t.Helper()
	var last string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		code, body := adminDo(t, base, "GET", "/api/v1/drain_jobs/query?id="+id, "")
		if code != http.StatusOK {
			t.Fatalf("query job %s = %d %s", id, code, body)
		}
		last = body
		var st DrainJobStatus
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if st.State != drainJobStateRunning {
			return st
		}
	}
	t.Fatalf("drain job %s still running after 10 s: %s", id, last)
	return DrainJobStatus{}
}

func TestAdminGetAllSegmentsIsPlainTextNames(t *testing.T) {
	srv := newTestServer(t, nil)
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	if code, body := adminDo(t, h.URL, "GET", "/get_all_segments", ""); code != 200 || body != "" {
		t.Fatalf("no segments: /get_all_segments = %d %q, want 200 and an empty body", code, body)
	}
	c := ctx(t)
	for _, m := range []struct{ client, id string }{{"c1", "s1"}, {"c2", "s2"}} {
		if r, err := srv.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: m.client, Segment: seg(m.id, 1<<20)}); err != nil || r.ErrorCode != 0 {
			t.Fatalf("mount %s: %v %v", m.id, r, err)
		}
	}
	code, body := adminDo(t, h.URL, "GET", "/get_all_segments", "")
	if code != 200 || body != "host-s1\nhost-s2\n" {
		t.Fatalf("/get_all_segments = %d %q, want the two names one per line", code, body)
	}
}

func TestAdminDrainJobEmptiesSegment(t *testing.T) {
	// A short lease: the dropped buffer is free once the put's lease ends.
	srv := newTestServer(t, func(o *Options) { o.Config.DefaultLeaseTTL = time.Millisecond })
	srv.Start() // its client loop frees the quarantined buffer
	defer srv.Close()
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	c := ctx(t)
	for _, m := range []struct{ client, id string }{{"c1", "s1"}, {"c2", "s2"}} {
		if r, err := srv.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: m.client, Segment: seg(m.id, 1<<20)}); err != nil || r.ErrorCode != 0 {
			t.Fatalf("mount %s: %v %v", m.id, r, err)
		}
	}
	// Two replicas, one per segment: draining s1 drops its copy (no third
	// segment takes one, and s2's outlives c1).
	ps, err := srv.PutStart(c, &masterpb.PutStartRequest{ClientId: "c1", Key: "k", Size: 100, Config: &masterpb.ReplicateConfig{ReplicaNum: 2}})
	if err != nil || ps.ErrorCode != 0 || len(ps.Replicas) != 2 {
		t.Fatalf("put start: %v %v", ps, err)
	}
	if r, err := srv.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c1", Key: "k"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("put end: %v %v", r, err)
	}
	code, body := adminDo(t, h.URL, "POST", "/api/v1/drain_jobs", `{"segment_names":["host-s1"],"timeout_seconds":30}`)
	if code != http.StatusCreated {
		t.Fatalf("create = %d %s", code, body)
	}
	var created createdDrainJob
	if err := json.Unmarshal([]byte(body), &created); err != nil || created.ID == "" || len(created.SegmentIDs) != 1 || created.SegmentIDs[0] != "s1" {
		t.Fatalf("create body %s (%v)", body, err)
	}
	code, body = adminDo(t, h.URL, "GET", "/api/v1/segments/status?segment=s1", "")
	if code != 200 || !strings.Contains(body, `"mode":"DRAINING"`) {
		t.Fatalf("segments/status of s1 = %d %s, want DRAINING", code, body)
	}
	if st := waitDrainJob(t, h.URL, created.ID); st.State != drainJobStateSucceeded || st.Dropped != 1 || st.Remaining != 0 || st.Passes < 1 {
		t.Fatalf("job = %+v, want SUCCEEDED with one dropped replica", st)
	}
	srv.WithState(func(st *State, _ time.Time) {
		for _, sg := range st.Segments() {
			if sg.ID == "s1" && sg.Allocated != 0 {
				t.Errorf("s1 still holds %d bytes after the drain", sg.Allocated)
			}
		}
	})
	code, body = adminDo(t, h.URL, "GET", "/api/v1/segments/status", "")
	var segs []SegmentStatus
	if err := json.Unmarshal([]byte(body), &segs); code != 200 || err != nil || len(segs) != 2 || segs[0].Mode != "DRAINING" || segs[1].Mode != "ACTIVE" {
		t.Fatalf("segments/status = %d %s", code, body)
	}
}

func TestAdminDrainJobTimesOutWithUnplaceableReplica(t *testing.T) {
	srv := newTestServer(t, nil)
	defer srv.Close()
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	c := ctx(t)
	if r, err := srv.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c1", Segment: seg("s1", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	if ps, err := srv.PutStart(c, &masterpb.PutStartRequest{ClientId: "c1", Key: "k", Size: 100, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}}); err != nil || ps.ErrorCode != 0 {
		t.Fatalf("put start: %v %v", ps, err)
	}
	if r, err := srv.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c1", Key: "k"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("put end: %v %v", r, err)
	}
	code, body := adminDo(t, h.URL, "POST", "/api/v1/drain_jobs", `{"segment_ids":["s1"],"timeout_seconds":0.05}`)
	if code != http.StatusCreated {
		t.Fatalf("create = %d %s", code, body)
	}
	var created createdDrainJob
	_ = json.Unmarshal([]byte(body), &created)
	st := waitDrainJob(t, h.URL, created.ID)
	if st.State != drainJobStateFailed || st.Unplaceable != 1 || st.Remaining != 1 || !strings.Contains(st.Error, "not finished") {
		t.Fatalf("job = %+v, want FAILED with the one unplaceable replica", st)
	}
}

func TestAdminDrainJobRejectsBadRequests(t *testing.T) {
	srv := newTestServer(t, nil)
	defer srv.Close()
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	if r, err := srv.MountSegment(ctx(t), &masterpb.MountSegmentRequest{ClientId: "c1", Segment: seg("s1", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	srv.WithState(func(st *State, now time.Time) { st.SetSegmentMode("c1", "s1", SegmentRetired, now) })
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/api/v1/drain_jobs", `not json`, 400},
		{"POST", "/api/v1/drain_jobs", `{}`, 400},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":[""]}`, 400},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["s1"],"bogus":1}`, 400},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["s1"]} {}`, 400},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["s1"],"timeout_seconds":-1}`, 400},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["s1"],"timeout_seconds":1e9}`, 400},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["` + strings.Repeat("x", maxDrainBodyBytes) + `"]}`, 413},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["nope"]}`, 404},
		{"POST", "/api/v1/drain_jobs", `{"segment_names":["nope"]}`, 404},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["s1"]}`, 409}, // retired
		{"GET", "/api/v1/drain_jobs/query", ``, 400},
		{"GET", "/api/v1/drain_jobs/query?id=x", ``, 400},
		{"GET", "/api/v1/drain_jobs/query?id=7", ``, 404},
		{"GET", "/api/v1/segments/status?segment=nope", ``, 404},
		{"GET", "/api/v1/drain_jobs", ``, 405},
	} {
		if code, body := adminDo(t, h.URL, tc.method, tc.path, tc.body); code != tc.want {
			t.Errorf("%s %s %.60q = %d %s, want %d", tc.method, tc.path, tc.body, code, body, tc.want)
		}
	}
}

// With tenant tokens configured, drain jobs need the admin token.
func TestAdminDrainJobNeedsAdminTokenWithTenantTokens(t *testing.T) {
	srv := newTestServer(t, func(o *Options) {
		o.Config.MultiTenant = true
		o.TenantTokens = testTokens(t)
	})
	defer srv.Close()
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	for _, tc := range []struct {
		method, path, body, token string
		want                      int
	}{
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["nope"]}`, "", 401},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["nope"]}`, tokA, 401},
		{"POST", "/api/v1/drain_jobs", `{"segment_ids":["nope"]}`, tokAdmin, 404},
		{"GET", "/api/v1/drain_jobs/query?id=1", ``, "", 401},
		{"GET", "/api/v1/drain_jobs/query?id=1", ``, tokAdmin, 404},
	} {
		req, _ := http.NewRequest(tc.method, h.URL+tc.path, strings.NewReader(tc.body))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s with token %q = %d, want %d", tc.method, tc.path, tc.token, resp.StatusCode, tc.want)
		}
	}
}

// Upstream's request fields: segments (names), target_segments (where
// moves may go) and max_concurrency (moves of the job in flight at once).
// No client executes the move tasks here, so the ones started stay in
// flight and the limit is what the passes can start.
func TestAdminDrainJobTakesUpstreamFields(t *testing.T) {
	srv := newTestServer(t, nil)
	defer srv.Close()
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	c := ctx(t)
	for _, m := range []struct{ client, id string }{{"c1", "s1"}, {"c2", "s2"}, {"c3", "s3"}} {
		if r, err := srv.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: m.client, Segment: seg(m.id, 1<<20)}); err != nil || r.ErrorCode != 0 {
			t.Fatalf("mount %s: %v %v", m.id, r, err)
		}
	}
	for _, k := range []string{"k0", "k1", "k2"} {
		cfg := &masterpb.ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"host-s1"}}
		if ps, err := srv.PutStart(c, &masterpb.PutStartRequest{ClientId: "c1", Key: k, Size: 100, Config: cfg}); err != nil || ps.ErrorCode != 0 {
			t.Fatalf("put start %s: %v %v", k, ps, err)
		}
		if r, err := srv.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c1", Key: k}); err != nil || r.ErrorCode != 0 {
			t.Fatalf("put end %s: %v %v", k, r, err)
		}
	}
	code, body := adminDo(t, h.URL, "POST", "/api/v1/drain_jobs", `{"segments":["host-s1"],"target_segments":["host-s3"],"max_concurrency":1}`)
	if code != http.StatusCreated {
		t.Fatalf("create = %d %s", code, body)
	}
	var created createdDrainJob
	if err := json.Unmarshal([]byte(body), &created); err != nil || !created.Success || created.JobID != created.ID ||
		created.MaxConcurrency != 1 || len(created.TargetIDs) != 1 || created.TargetIDs[0] != "s3" {
		t.Fatalf("create body %s (%v)", body, err)
	}
	var st DrainJobStatus
	for deadline := time.Now().Add(10 * time.Second); st.Passes < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job ran %d passes in 10 s", st.Passes)
		}
		code, body = adminDo(t, h.URL, "GET", "/api/v1/drain_jobs/query?job_id="+created.ID, "")
		if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
			t.Fatalf("query = %d %s", code, body)
		}
	}
	if st.Moving != 1 || st.Moves != 1 || st.Remaining != 3 {
		t.Fatalf("job after %d passes = %+v, want one move in flight (max_concurrency 1) and the 3 replicas on s1", st.Passes, st)
	}
	srv.WithState(func(s *State, _ time.Time) {
		n := 0
		for _, tk := range s.tasks {
			if tk.final() {
				continue
			}
			n++
			for _, r := range tk.targets {
				if r.seg.info.ID != "s3" {
					t.Errorf("task %v moves %s to %s, want only the target segment s3", tk.id, tk.key, r.seg.info.ID)
				}
			}
		}
		if n != 1 {
			t.Errorf("%d unfinished move tasks, want 1", n)
		}
	})
	// upstream's default concurrency applies to its request form
	code, body = adminDo(t, h.URL, "POST", "/api/v1/drain_jobs", `{"segments":["host-s2"]}`)
	var second createdDrainJob
	if err := json.Unmarshal([]byte(body), &second); code != http.StatusCreated || err != nil || second.MaxConcurrency != 4 || second.TargetIDs != nil {
		t.Fatalf("create without max_concurrency = %d %s, want max_concurrency 4 and no targets", code, body)
	}
}

func TestAdminDrainJobRejectsBadUpstreamFields(t *testing.T) {
	srv := newTestServer(t, nil)
	defer srv.Close()
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	for _, m := range []struct{ client, id string }{{"c1", "s1"}, {"c2", "s2"}} {
		if r, err := srv.MountSegment(ctx(t), &masterpb.MountSegmentRequest{ClientId: m.client, Segment: seg(m.id, 1<<20)}); err != nil || r.ErrorCode != 0 {
			t.Fatalf("mount %s: %v %v", m.id, r, err)
		}
	}
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"segments":["host-s1"],"max_concurrency":0}`, 400},
		{`{"segments":["host-s1"],"max_concurrency":-1}`, 400},
		{`{"segments":["host-s1"],"max_concurrency":1.5}`, 400},
		{`{"segments":["host-s1"],"target_segments":[]}`, 400},
		{`{"segments":["host-s1"],"target_segments":[""]}`, 400},
		{`{"segments":["host-s1"],"target_segments":["host-s1"]}`, 400}, // drained and target
		{`{"segments":["host-s1"],"target_segments":["nope"]}`, 404},
		{`{"segments":["nope"]}`, 404},
	} {
		if code, body := adminDo(t, h.URL, "POST", "/api/v1/drain_jobs", tc.body); code != tc.want {
			t.Errorf("POST %s = %d %s, want %d", tc.body, code, body, tc.want)
		}
	}
}

// Upstream's drain script reads its own shapes: the create answer's
// status CREATED, the query's status_name and units, and
// /api/v1/segments/status?segment= as one object going DRAINING, then
// DRAINED. The test plays the owning client: it fetches the move tasks,
// fails the first one and completes the rest (the failed replica is moved
// again by a later pass).
func TestAdminDrainJobAnswersInUpstreamShapes(t *testing.T) {
	srv := newTestServer(t, func(o *Options) { o.Config.DefaultLeaseTTL = time.Millisecond })
	srv.Start() // its client loop frees the moved buffers once their lease ends
	defer srv.Close()
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	c := ctx(t)
	for _, m := range []struct{ client, id string }{{"c1", "s1"}, {"c2", "s2"}} {
		if r, err := srv.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: m.client, Segment: seg(m.id, 1<<20)}); err != nil || r.ErrorCode != 0 {
			t.Fatalf("mount %s: %v %v", m.id, r, err)
		}
	}
	for i, k := range []string{"k0", "k1", "k2"} {
		cfg := &masterpb.ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"host-s1"}}
		if ps, err := srv.PutStart(c, &masterpb.PutStartRequest{ClientId: "c1", Key: k, Size: uint64(100 * (i + 1)), Config: cfg}); err != nil || ps.ErrorCode != 0 {
			t.Fatalf("put start %s: %v %v", k, ps, err)
		}
		if r, err := srv.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c1", Key: k}); err != nil || r.ErrorCode != 0 {
			t.Fatalf("put end %s: %v %v", k, r, err)
		}
	}
	code, body := adminDo(t, h.URL, "POST", "/api/v1/drain_jobs", `{"segments":["host-s1"],"target_segments":["host-s2"],"max_concurrency":1}`)
	var created struct {
		Success bool   `json:"success"`
		JobID   string `json:"job_id"`
		ID      string `json:"id"`
		Status  string `json:"status"`
	}
	if err := json.Unmarshal([]byte(body), &created); code != http.StatusCreated || err != nil ||
		!created.Success || created.JobID != created.ID || created.Status != "CREATED" {
		t.Fatalf("create = %d %s (%v)", code, body, err)
	}
	segStatus := func(name string) oneSegmentStatus {
		t.Helper()
		code, body := adminDo(t, h.URL, "GET", "/api/v1/segments/status?segment="+name, "")
		var one oneSegmentStatus
		if err := json.Unmarshal([]byte(body), &one); code != 200 || err != nil || !one.Success || one.Segment != name {
			t.Fatalf("segments/status?segment=%s = %d %s (%v)", name, code, body, err)
		}
		return one
	}
	if one := segStatus("host-s1"); one.Status != 2 || one.StatusName != "DRAINING" || len(one.Segments) != 1 || one.Segments[0].Mode != "DRAINING" {
		t.Fatalf("host-s1 while draining: %+v, want upstream's DRAINING (2)", one)
	}
	var job DrainJobStatus
	failed := false
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not finish in 10 s: %+v", job)
		}
		srv.WithState(func(st *State, now time.Time) {
			for _, task := range st.FetchTasks("c1", now) {
				if code := st.CompleteTask("c1", task.ID, failed, "", now); code != kvstore.OK {
					t.Errorf("complete task %v: %v", task.ID, code)
				}
				failed = true // only the first one fails
			}
		})
		code, body := adminDo(t, h.URL, "GET", "/api/v1/drain_jobs/query?job_id="+created.JobID, "")
		if err := json.Unmarshal([]byte(body), &job); code != 200 || err != nil {
			t.Fatalf("query = %d %s (%v)", code, body, err)
		}
		if !job.Success || job.JobID != created.JobID || job.StatusName != job.State || job.Type != 0 || job.TypeName != "DRAIN" {
			t.Fatalf("query answer %s lacks upstream's fields", body)
		}
		if job.State != drainJobStateRunning {
			break
		}
		if job.Status != 2 || job.ActiveUnits > 1 {
			t.Fatalf("running job %s: want status 2 and at most one unit in flight (max_concurrency 1)", body)
		}
	}
	if job.StatusName != "SUCCEEDED" || job.Status != 3 || job.ActiveUnits != 0 || job.SucceededUnits != 3 ||
		job.FailedUnits != 1 || job.BlockedUnits != 0 || job.MigratedBytes != 600 || job.Message != "" ||
		len(job.Segments) != 1 || job.Segments[0] != "host-s1" || job.CreatedAtMsEpoch != job.CreatedAtMs {
		t.Fatalf("finished job %+v, want SUCCEEDED: 3 moves of 600 bytes, one failed try, none active", job)
	}
	if one := segStatus("host-s1"); one.Status != 3 || one.StatusName != "DRAINED" {
		t.Fatalf("host-s1 after the job: %+v, want DRAINED (3)", one)
	}
	if one := segStatus("s2"); one.Status != 1 || one.StatusName != "OK" {
		t.Fatalf("s2: %+v, want OK (1)", one)
	}
	code, body = adminDo(t, h.URL, "GET", "/api/v1/segments/status", "")
	var all []SegmentStatus
	if err := json.Unmarshal([]byte(body), &all); code != 200 || err != nil || len(all) != 2 ||
		all[0].StatusName != "DRAINED" || all[1].StatusName != "OK" {
		t.Fatalf("segments/status = %d %s (%v): the list, each with its upstream status", code, body, err)
	}
}
