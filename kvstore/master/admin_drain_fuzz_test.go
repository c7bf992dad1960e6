package master

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

// FuzzDrainJobsBody feeds arbitrary bodies to the POST /api/v1/drain_jobs
// decoder: it must not panic, and whatever it accepts stays in bounds.
func FuzzDrainJobsBody(f *testing.F) {
	for _, s := range []string{
		`{"segment_ids":["s1"]}`,
		`{"segment_names":["host:1234"],"timeout_seconds":30}`,
		`{"segment_ids":["a","b"],"segment_names":["n"],"timeout_seconds":0.5}`,
		`{"segment_ids":[""]}`,
		`{"segment_ids":["s1"],"timeout_seconds":-1}`,
		`{"segment_ids":["s1"]} {}`,
		`{"segment_ids":"s1"}`,
		`{"segments":["0"]}`,
		`{"segments":["a"],"target_segments":["b"],"max_concurrency":1}`,
		`{"segments":["a"],"target_segments":[]}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, timeout, err := decodeDrainJobRequest(bytes.NewReader(body))
		if err != nil {
			return
		}
		if len(body) > maxDrainBodyBytes {
			t.Fatalf("accepted a body of %d bytes", len(body))
		}
		n := len(req.SegmentIDs) + len(req.SegmentNames) + len(req.Segments)
		if n == 0 || n > maxDrainSegments || len(req.TargetSegments) > maxDrainSegments {
			t.Fatalf("accepted %d segments, %d target segments", n, len(req.TargetSegments))
		}
		if req.TargetSegments != nil && len(req.TargetSegments) == 0 {
			t.Fatalf("accepted an empty target_segments")
		}
		if m := req.MaxConcurrency; m != nil && (*m < 1 || *m > maxDrainConcurrency) {
			t.Fatalf("accepted max_concurrency %d", *m)
		}
		for _, id := range slices.Concat(req.SegmentIDs, req.SegmentNames, req.Segments, req.TargetSegments) {
			if id == "" || len(id) > maxDrainSegmentIDLen {
				t.Fatalf("accepted segment %q", id)
			}
		}
		if timeout <= 0 || timeout > maxDrainTimeout+time.Millisecond {
			t.Fatalf("accepted timeout %v", timeout)
		}
	})
}
