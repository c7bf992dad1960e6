package master

import (
	"bytes"
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
		n := len(req.SegmentIDs) + len(req.SegmentNames)
		if n == 0 || n > maxDrainSegments {
			t.Fatalf("accepted %d segments", n)
		}
		for _, id := range append(append([]string{}, req.SegmentIDs...), req.SegmentNames...) {
			if id == "" || len(id) > maxDrainSegmentIDLen {
				t.Fatalf("accepted segment %q", id)
			}
		}
		if timeout <= 0 || timeout > maxDrainTimeout+time.Millisecond {
			t.Fatalf("accepted timeout %v", timeout)
		}
	})
}
