package master

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// This file serves drain jobs and the segment lists on the admin port:
//
//	GET  /get_all_segments          plain text, one segment name per line
//
//	POST /api/v1/drain_jobs          start a drain job (drainJobRequest body)
//	GET  /api/v1/drain_jobs/query    ?id=N: one job's status (DrainJobStatus)
//	GET  /api/v1/segments/status     segments and modes; ?segment=ID or name:
//	                                 those, in upstream's object form
//
// A drain job is the master-side form of the client's drain_segment: the
// segments go DRAINING (no new replicas) and the master runs evacuation
// passes until they are empty and no reader can hold one of their buffers,
// or until the job's timeout. The owning client executes the move tasks,
// as it does for its own drains.

// Bounds on a drain job request.
const (
	maxDrainBodyBytes      = 64 << 10
	maxDrainSegments       = 1024
	maxDrainSegmentIDLen   = 256
	maxDrainTimeout        = 24 * time.Hour
	defaultDrainTimeout    = 120 * time.Second
	maxRunningDrainJobs    = 64
	maxFinishedDrainJobs   = 256
	maxDrainConcurrency    = 1 << 20
	upstreamDrainMoves     = 4 // upstream's max_concurrency default
	drainJobPassInterval   = 250 * time.Millisecond
	drainJobStateRunning   = "RUNNING"
	drainJobStateSucceeded = "SUCCEEDED"
	drainJobStateFailed    = "FAILED"
)

// Upstream's numbering of a job (its JobType and JobStatus enums) and of a
// segment (SegmentStatus), which its responses carry beside the names.
const (
	upstreamJobTypeDrain     = 0
	upstreamJobTypeDrainName = "DRAIN"
)

var (
	upstreamJobStatus = map[string]int{
		"CREATED": 0, "PLANNING": 1, drainJobStateRunning: 2,
		drainJobStateSucceeded: 3, drainJobStateFailed: 4, "CANCELED": 5,
	}
	upstreamSegmentStatusNames = [...]string{"UNDEFINED", "OK", "DRAINING", "DRAINED", "GRACEFULLY_UNMOUNTING", "UNMOUNTING"}
)

// Upstream's segment statuses this master reports (indexes into
// upstreamSegmentStatusNames).
const (
	upstreamSegmentUndefined = 0
	upstreamSegmentOK        = 1
	upstreamSegmentDraining  = 2
	upstreamSegmentDrained   = 3
)

// drainJobRequest is the body of POST /api/v1/drain_jobs: the fields of
// the Python drain_segment call, segment_ids (segment ids), or
// segment_names (every segment mounted under that name, as
// /get_all_segments lists them), and timeout_seconds (default 120); and
// upstream's fields: segments (segment names, as segment_names),
// target_segments (names of the segments the moved replicas may go to;
// absent: any ACTIVE segment) and max_concurrency (at most that many of
// the job's moves in flight at once; absent: 4 when the request uses
// segments, as upstream's default, else no limit).
type drainJobRequest struct {
	SegmentIDs     []string `json:"segment_ids"`
	SegmentNames   []string `json:"segment_names"`
	Segments       []string `json:"segments"`
	TargetSegments []string `json:"target_segments"`
	MaxConcurrency *int64   `json:"max_concurrency"`
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

// names returns every segment name the request drains (segment_names and
// upstream's segments).
func (r drainJobRequest) names() []string { return slices.Concat(r.SegmentNames, r.Segments) }

// maxMoves returns the job's limit on moves in flight; 0 means none.
func (r drainJobRequest) maxMoves() int {
	switch {
	case r.MaxConcurrency != nil:
		return int(*r.MaxConcurrency)
	case len(r.Segments) > 0:
		return upstreamDrainMoves
	}
	return 0
}

// errDrainBodyTooLarge is decodeDrainJobRequest's error for a body over
// maxDrainBodyBytes.
var errDrainBodyTooLarge = errors.New("request body too large")

// decodeDrainJobRequest reads and validates a drain job request: one JSON
// object, no unknown fields, nothing after it, 1..maxDrainSegments
// non-empty segment ids and names (and at most as many target names) of
// at most maxDrainSegmentIDLen bytes, max_concurrency in
// [1, maxDrainConcurrency], and a timeout in (0, 24h]. It returns the
// request and the timeout.
func decodeDrainJobRequest(r io.Reader) (drainJobRequest, time.Duration, error) {
	var req drainJobRequest
	body, err := io.ReadAll(io.LimitReader(r, maxDrainBodyBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return req, 0, errDrainBodyTooLarge
		}
		return req, 0, fmt.Errorf("reading the body: %w", err)
	}
	if len(body) > maxDrainBodyBytes {
		return req, 0, errDrainBodyTooLarge
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, 0, fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return req, 0, errors.New("invalid JSON body: data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, 0, errors.New("invalid JSON body: data after the object")
	}
	n := len(req.SegmentIDs) + len(req.names())
	if n == 0 {
		return req, 0, errors.New("segment_ids, segment_names or segments must name at least one segment")
	}
	if n > maxDrainSegments || len(req.TargetSegments) > maxDrainSegments {
		return req, 0, fmt.Errorf("at most %d segments and %d target segments per job, got %d and %d",
			maxDrainSegments, maxDrainSegments, n, len(req.TargetSegments))
	}
	if req.TargetSegments != nil && len(req.TargetSegments) == 0 {
		return req, 0, errors.New("target_segments, when given, must name at least one segment")
	}
	if m := req.MaxConcurrency; m != nil && (*m < 1 || *m > maxDrainConcurrency) {
		return req, 0, fmt.Errorf("max_concurrency must be in [1, %d], got %d", maxDrainConcurrency, *m)
	}
	for _, id := range slices.Concat(req.SegmentIDs, req.names(), req.TargetSegments) {
		if id == "" || len(id) > maxDrainSegmentIDLen {
			return req, 0, fmt.Errorf("segment ids and names must be 1..%d bytes, got %d", maxDrainSegmentIDLen, len(id))
		}
	}
	timeout := defaultDrainTimeout
	if req.TimeoutSeconds != nil {
		t := *req.TimeoutSeconds
		if !(t > 0) || t > maxDrainTimeout.Seconds() {
			return req, 0, fmt.Errorf("timeout_seconds must be in (0, %d], got %v", int(maxDrainTimeout.Seconds()), t)
		}
		timeout = max(time.Millisecond, time.Duration(t*float64(time.Second)))
	}
	return req, timeout, nil
}

// DrainJobStatus is a drain job as GET /api/v1/drain_jobs/query shows it.
// Moves, Dropped and Passes add up over the passes (as the Python drain
// report's fields); Remaining to Quarantined are the last pass's totals
// over the job's segments.
type DrainJobStatus struct {
	ID             string   `json:"id"`
	State          string   `json:"state"` // RUNNING, SUCCEEDED or FAILED
	SegmentIDs     []string `json:"segment_ids"`
	TargetIDs      []string `json:"target_segment_ids,omitempty"` // where moves may go; absent: any ACTIVE segment
	MaxConcurrency int      `json:"max_concurrency"`              // moves in flight at most; 0: no limit
	TimeoutSeconds float64  `json:"timeout_seconds"`
	Moves          int      `json:"moves"`
	Dropped        int      `json:"dropped"`
	Passes         int      `json:"passes"`
	Remaining      int      `json:"remaining"`
	Moving         int      `json:"moving"`
	Unplaceable    int      `json:"unplaceable"`
	Quarantined    int      `json:"quarantined"`
	ErrorCode      int      `json:"error_code"`
	Error          string   `json:"error"`
	CreatedAtMs    int64    `json:"created_at_ms"`
	UpdatedAtMs    int64    `json:"updated_at_ms"`

	// Upstream's fields (its drain job query response), beside ours. A unit
	// is one move task the job started: it succeeded, failed (the replica
	// stays and a later pass moves it again) or is in flight.
	Success              bool     `json:"success"`     // always true in an answer
	JobID                string   `json:"job_id"`      // = id
	Type                 int      `json:"type"`        // 0: a drain
	TypeName             string   `json:"type_name"`   // DRAIN
	Status               int      `json:"status"`      // 2 RUNNING, 3 SUCCEEDED, 4 FAILED
	StatusName           string   `json:"status_name"` // = state
	Segments             []string `json:"segments"`    // the drained segments' names
	SucceededUnits       int      `json:"succeeded_units"`
	FailedUnits          int      `json:"failed_units"`
	BlockedUnits         int      `json:"blocked_units"` // = unplaceable
	ActiveUnits          int      `json:"active_units"`
	MigratedBytes        uint64   `json:"migrated_bytes"` // the objects the succeeded units moved
	Message              string   `json:"message"`        // = error
	CreatedAtMsEpoch     int64    `json:"created_at_ms_epoch"`
	LastUpdatedAtMsEpoch int64    `json:"last_updated_at_ms_epoch"`

	// tasks are the job's move tasks not yet seen final (read by run's
	// goroutine, written by it under drainJobs.mu).
	tasks []TaskID
}

// answer returns a copy of j to send, upstream's fields filled in.
func (j *DrainJobStatus) answer() DrainJobStatus {
	out := *j
	out.SegmentIDs = slices.Clone(j.SegmentIDs)
	out.Segments = slices.Clone(j.Segments)
	out.tasks = nil
	out.Success, out.JobID = true, j.ID
	out.Type, out.TypeName = upstreamJobTypeDrain, upstreamJobTypeDrainName
	out.Status, out.StatusName = upstreamJobStatus[j.State], j.State
	out.BlockedUnits, out.Message = j.Unplaceable, j.Error
	out.CreatedAtMsEpoch, out.LastUpdatedAtMsEpoch = j.CreatedAtMs, j.UpdatedAtMs
	return out
}

// createdDrainJob is the body of a created job: its status (with
// upstream's success and job_id) and upstream's "status": "CREATED".
type createdDrainJob struct {
	DrainJobStatus
	Status string `json:"status"`
}

// drainJobs is the job table of one admin handler.
type drainJobs struct {
	s        *Server
	mu       sync.Mutex
	next     uint64
	jobs     map[string]*DrainJobStatus
	finished []string // ids of finished jobs, oldest first
	running  int
}

// registerDrainRoutes adds the drain job and segment status endpoints to mux.
func registerDrainRoutes(mux *http.ServeMux, s *Server) {
	d := &drainJobs{s: s, jobs: map[string]*DrainJobStatus{}}
	mux.HandleFunc("POST /api/v1/drain_jobs", d.create)
	mux.HandleFunc("GET /api/v1/drain_jobs/query", d.query)
	mux.HandleFunc("GET /api/v1/segments/status", d.segmentsStatus)
}

// create starts a job: 201 with its status; 400 for a bad body, 413 for a
// large one, 404 for an unknown segment, 409 for a segment that cannot
// drain (retired, or in another running job), 503 on a standby or with
// too many running jobs. With tenant tokens configured it needs the admin
// token (401 otherwise), as does query; without them it is served only to
// loopback callers unless --admin_allow_remote (403; authorizeChange).
func (d *drainJobs) create(w http.ResponseWriter, r *http.Request) {
	if !d.s.authorizeChange(w, r) {
		return
	}
	if d.s.rep != nil {
		http.Error(w, "drain jobs are not replicated by the oplog (--enable_oplog): drain segments with the DrainSegment RPC or without the oplog", http.StatusNotImplemented)
		return
	}
	req, timeout, err := decodeDrainJobRequest(http.MaxBytesReader(w, r.Body, maxDrainBodyBytes))
	if errors.Is(err, errDrainBodyTooLarge) {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running >= maxRunningDrainJobs {
		http.Error(w, fmt.Sprintf("%d drain jobs are running; wait for one to finish", d.running), http.StatusServiceUnavailable)
		return
	}
	var (
		ids, names, targets []string
		status              = http.StatusCreated
		msg                 string
	)
	err = d.s.do(func(st *State, now time.Time) {
		owners := map[string]string{}
		for _, sg := range st.Segments() {
			if slices.Contains(req.SegmentIDs, sg.ID) || slices.Contains(req.names(), sg.Name) {
				if _, dup := owners[sg.ID]; !dup {
					ids = append(ids, sg.ID)
					names = append(names, sg.Name)
				}
				owners[sg.ID] = sg.ClientID
				if sg.Mode == SegmentRetired {
					status, msg = http.StatusConflict, fmt.Sprintf("segment %s is RETIRED", sg.ID)
					return
				}
			}
		}
		for _, id := range req.SegmentIDs {
			if _, ok := owners[id]; !ok {
				status, msg = http.StatusNotFound, fmt.Sprintf("segment id %q is not mounted", id)
				return
			}
		}
		for _, name := range slices.Concat(req.names(), req.TargetSegments) {
			if !slices.ContainsFunc(st.Segments(), func(sg SegmentInfo) bool { return sg.Name == name }) {
				status, msg = http.StatusNotFound, fmt.Sprintf("no segment is mounted as %q", name)
				return
			}
		}
		for _, sg := range st.Segments() {
			if !slices.Contains(req.TargetSegments, sg.Name) {
				continue
			}
			if _, drained := owners[sg.ID]; drained {
				status, msg = http.StatusBadRequest, fmt.Sprintf("segment %s is both drained and a target", sg.ID)
				return
			}
			targets = append(targets, sg.ID)
		}
		for _, j := range d.jobs {
			if j.State != drainJobStateRunning {
				continue
			}
			for _, id := range ids {
				if slices.Contains(j.SegmentIDs, id) {
					status, msg = http.StatusConflict, fmt.Sprintf("segment %s is in running drain job %s", id, j.ID)
					return
				}
			}
		}
		for _, id := range ids {
			if code := st.SetSegmentMode(owners[id], id, SegmentDraining, now); code != kvstore.OK {
				status, msg = http.StatusConflict, fmt.Sprintf("segment %s: %v", id, code)
				return
			}
		}
	})
	if err != nil {
		http.Error(w, "not the leader", http.StatusServiceUnavailable)
		return
	}
	if status != http.StatusCreated {
		http.Error(w, msg, status)
		return
	}
	select {
	case <-d.s.stop:
		http.Error(w, "the master is shutting down", http.StatusServiceUnavailable)
		return
	default:
	}
	d.next++
	now := d.s.clock().UnixMilli()
	job := &DrainJobStatus{ID: strconv.FormatUint(d.next, 10), State: drainJobStateRunning, SegmentIDs: ids, Segments: names,
		TargetIDs: targets, MaxConcurrency: req.maxMoves(), TimeoutSeconds: timeout.Seconds(), CreatedAtMs: now, UpdatedAtMs: now}
	d.jobs[job.ID] = job
	d.running++
	created := createdDrainJob{DrainJobStatus: job.answer(), Status: "CREATED"} // run updates job from here on
	go d.run(job, timeout)
	writeJSON(w, http.StatusCreated, created)
}

// run drives job's evacuation passes until it finishes or the master stops.
func (d *drainJobs) run(job *DrainJobStatus, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(drainJobPassInterval)
	defer tick.Stop()
	for {
		if d.pass(job, time.Now().After(deadline)) {
			return
		}
		select {
		case <-d.s.stop:
			d.finish(job, int(kvstore.InternalError), "the master shut down")
			return
		case <-tick.C:
		}
	}
}

// pass runs one evacuation pass over the job's segments and records it;
// it reports whether the job is over (done, failed, or past its deadline).
func (d *drainJobs) pass(job *DrainJobStatus, late bool) bool {
	var (
		total    Evacuation
		code     = kvstore.OK
		failedOn string
		units    unitCount
	)
	err := d.s.do(func(st *State, now time.Time) {
		units = countUnits(st, job.tasks)
		lim := EvacuationLimits{MaxStarts: -1}
		if job.TargetIDs != nil {
			lim.Targets = map[string]bool{}
			for _, id := range job.TargetIDs {
				lim.Targets[id] = true
			}
		}
		if job.MaxConcurrency > 0 {
			lim.MaxStarts = job.MaxConcurrency
			for _, id := range job.SegmentIDs {
				if sg, ok := st.segments[id]; ok {
					lim.MaxStarts -= len(st.movingFrom(sg))
				}
			}
			lim.MaxStarts = max(lim.MaxStarts, 0)
		}
		for _, id := range job.SegmentIDs {
			sg, ok := st.segments[id]
			if !ok {
				code, failedOn = kvstore.SegmentNotFound, id
				return
			}
			ev, c := st.EvacuateSegmentLimited(sg.client, id, now, lim)
			if lim.MaxStarts > 0 {
				lim.MaxStarts -= ev.Started
			}
			if c != kvstore.OK {
				code, failedOn = c, id
				return
			}
			total.Remaining += ev.Remaining
			total.Moving += ev.Moving
			total.Started += ev.Started
			total.Dropped += ev.Dropped
			total.Unplaceable += ev.Unplaceable
			total.Quarantined += ev.Quarantined
			units.active = append(units.active, ev.Tasks...)
		}
	})
	d.mu.Lock() // answer copies the job under d.mu: tasks is written under it too
	job.tasks = units.active
	job.SucceededUnits += units.succeeded
	job.FailedUnits += units.failed
	job.MigratedBytes += units.bytes
	job.ActiveUnits = len(units.active)
	job.Passes++
	job.Moves += total.Started
	job.Dropped += total.Dropped
	job.Remaining, job.Moving, job.Unplaceable, job.Quarantined = total.Remaining, total.Moving, total.Unplaceable, total.Quarantined
	job.UpdatedAtMs = d.s.clock().UnixMilli()
	d.mu.Unlock()
	switch {
	case err != nil:
		d.finish(job, int(kvstore.InternalError), "this master is no longer the leader")
	case code != kvstore.OK:
		d.finish(job, int(code), fmt.Sprintf("segment %s: %v", failedOn, code))
	case total.Done():
		d.finish(job, 0, "")
	case late:
		d.finish(job, int(kvstore.RPCTimeout), fmt.Sprintf("drain not finished after %s: %d replicas (%d moving, %d unplaceable), %d buffers readers may hold",
			time.Duration(job.TimeoutSeconds*float64(time.Second)), total.Remaining, total.Moving, total.Unplaceable, total.Quarantined))
	default:
		return false
	}
	return true
}

// unitCount is what became of a job's move tasks since the last pass.
type unitCount struct {
	succeeded, failed int
	bytes             uint64   // moved by the succeeded ones
	active            []TaskID // still in flight
}

// countUnits sorts a job's move tasks not yet seen final by their state in
// st. A task st no longer knows (its object was removed) counts as none.
func countUnits(st *State, tasks []TaskID) unitCount {
	var u unitCount
	for _, id := range tasks {
		t, ok := st.tasks[id]
		switch {
		case !ok:
		case t.status == TaskSuccess:
			u.succeeded++
			u.bytes += t.size
		case t.status == TaskFailed:
			u.failed++
		default:
			u.active = append(u.active, id)
		}
	}
	return u
}

// finish ends job with code (0: success) and msg, and forgets the oldest
// finished jobs beyond maxFinishedDrainJobs.
func (d *drainJobs) finish(job *DrainJobStatus, code int, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	job.State = drainJobStateSucceeded
	if code != 0 {
		job.State = drainJobStateFailed
	}
	job.ErrorCode, job.Error = code, msg
	job.UpdatedAtMs = d.s.clock().UnixMilli()
	d.running--
	d.finished = append(d.finished, job.ID)
	for len(d.finished) > maxFinishedDrainJobs {
		delete(d.jobs, d.finished[0])
		d.finished = d.finished[1:]
	}
}

// query answers GET /api/v1/drain_jobs/query?id=N (or upstream's
// ?job_id=N): 200 with the job, 400 without a numeric id, 404 for an
// unknown (or forgotten) one.
func (d *drainJobs) query(w http.ResponseWriter, r *http.Request) {
	if !d.s.authorizeAdmin(w, r, "") {
		return
	}
	id := r.URL.Query().Get("id")
	if id == "" {
		id = r.URL.Query().Get("job_id")
	}
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		http.Error(w, "id must be a drain job id (a decimal number)", http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	job, ok := d.jobs[id]
	var out DrainJobStatus
	if ok {
		out = job.answer()
	}
	d.mu.Unlock()
	if !ok {
		http.Error(w, fmt.Sprintf("no drain job %s", id), http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// SegmentStatus is one segment as GET /api/v1/segments/status lists it.
type SegmentStatus struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	ClientID   string `json:"client_id"`
	Base       uint64 `json:"base"`
	Size       uint64 `json:"size"`
	Allocated  uint64 `json:"allocated"`
	TEEndpoint string `json:"te_endpoint"`
	Protocol   string `json:"protocol"`
	HostID     string `json:"host_id"`
	Draining   bool   `json:"draining"` // takes no new replicas
	Mode       string `json:"mode"`     // ACTIVE, STANDBY, DRAINING or RETIRED
	// Suspect: the owner is silent past client_ttl; the segment takes no
	// new replicas and keeps those it holds.
	Suspect     bool   `json:"suspect"`
	Incarnation uint64 `json:"incarnation"` // 0: not told by the client
	// StatusName is upstream's SegmentStatus: OK (ACTIVE), DRAINING
	// (DRAINING or RETIRED, while a drain job runs on it or it holds
	// data), DRAINED (the same, empty, no job running on it), UNDEFINED
	// (STANDBY, which upstream lacks).
	StatusName string `json:"status_name"`
	status     int    // StatusName's number
}

// oneSegmentStatus is GET /api/v1/segments/status?segment=X: upstream's
// object (success, the segment asked for, status and status_name) and the
// segments that name or id matches in our form. Of several, the status is
// the most available one (OK before DRAINING before DRAINED ...): a name
// is DRAINED once every segment under it is.
type oneSegmentStatus struct {
	Success    bool            `json:"success"`
	Segment    string          `json:"segment"`
	Status     int             `json:"status"`
	StatusName string          `json:"status_name"`
	Segments   []SegmentStatus `json:"segments"`
}

// upstreamSegmentStatus returns upstream's status of sg; draining tells
// whether a running drain job covers it.
func upstreamSegmentStatus(sg SegmentInfo, draining bool) int {
	switch sg.Mode {
	case SegmentActive:
		return upstreamSegmentOK
	case SegmentDraining, SegmentRetired:
		if draining || sg.Allocated != 0 {
			return upstreamSegmentDraining
		}
		return upstreamSegmentDrained
	}
	return upstreamSegmentUndefined
}

// segmentsStatus answers GET /api/v1/segments/status: every mounted
// segment (a list), or with ?segment= those whose id or name it is in
// upstream's object form (404 if none).
func (d *drainJobs) segmentsStatus(w http.ResponseWriter, r *http.Request) {
	want, filter := r.URL.Query().Get("segment"), r.URL.Query().Has("segment")
	running := map[string]bool{}
	d.mu.Lock()
	for _, j := range d.jobs {
		if j.State == drainJobStateRunning {
			for _, id := range j.SegmentIDs {
				running[id] = true
			}
		}
	}
	d.mu.Unlock()
	out := []SegmentStatus{}
	d.s.WithState(func(st *State, _ time.Time) {
		for _, sg := range st.Segments() {
			if filter && sg.ID != want && sg.Name != want {
				continue
			}
			up := upstreamSegmentStatus(sg, running[sg.ID])
			out = append(out, SegmentStatus{sg.ID, sg.Name, sg.ClientID, sg.Base, sg.Size, sg.Allocated,
				sg.TEEndpoint, sg.Protocol, sg.HostID, sg.Draining, sg.Mode.String(), sg.Suspect, sg.Incarnation,
				upstreamSegmentStatusNames[up], up})
		}
	})
	if !filter {
		writeJSON(w, http.StatusOK, out)
		return
	}
	if len(out) == 0 {
		http.Error(w, fmt.Sprintf("no segment %q is mounted", want), http.StatusNotFound)
		return
	}
	one := oneSegmentStatus{Success: true, Segment: want, Status: out[0].status, Segments: out}
	for _, sg := range out[1:] {
		if segmentAvailability(sg.status) < segmentAvailability(one.Status) {
			one.Status = sg.status
		}
	}
	one.StatusName = upstreamSegmentStatusNames[one.Status]
	writeJSON(w, http.StatusOK, one)
}

// segmentAvailability ranks upstream's segment statuses, most available
// (OK) first, UNDEFINED last, as upstream orders them.
func segmentAvailability(status int) int {
	if status == upstreamSegmentUndefined {
		return len(upstreamSegmentStatusNames)
	}
	return status
}

// handleAllSegments answers GET /get_all_segments as upstream does: plain
// text, the name of each mounted segment on its own line (each name once),
// and an empty body when none is mounted (SGLang's check_server waits
// while it is empty). /api/v1/segments/status has the details.
func (s *Server) handleAllSegments(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	seen := map[string]bool{}
	s.WithState(func(st *State, _ time.Time) {
		for _, sg := range st.Segments() {
			if !seen[sg.Name] {
				seen[sg.Name] = true
				b.WriteString(sg.Name)
				b.WriteByte('\n')
			}
		}
	})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}
