package consistency

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestRecordedHistories checks histories recorded by the nemesis tests
// (cut to one key, up to just after the anomaly), so that the checker's
// verdict on real runs is pinned:
//
//   - failover-without-oplog.jsonl: kill -9 of the leader with masters
//     started without --enable_oplog; the new leader served with empty
//     metadata and a get of an acknowledged key returned -704.
//   - same-size-upsert-torn.jsonl: the same-size workload; a get that met
//     an upsert in place returned bytes of two values.
func TestRecordedHistories(t *testing.T) {
	for _, tc := range []struct {
		file, key string
		result    porcupine.CheckResult
		torn      int
		explains  string
	}{
		{"failover-without-oplog.jsonl", "small-b", porcupine.Illegal, 0, "get(small-b) -> -704"},
		{"same-size-upsert-torn.jsonl", "same-1m", porcupine.Ok, 1, "TORN: checksum mismatch"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			records, err := ReadRecords(f)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Check(records, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range rep.Keys {
				if k.Visualization != "" {
					os.Remove(k.Visualization)
				}
			}
			if len(rep.Keys) != 1 || rep.Keys[0].Key != tc.key || rep.Keys[0].Result != tc.result || len(rep.Keys[0].Torn) != tc.torn {
				t.Fatalf("want key %q %s with %d torn reads, got:\n%s", tc.key, tc.result, tc.torn, rep)
			}
			if !strings.Contains(rep.String(), tc.explains) {
				t.Fatalf("the report does not show %q:\n%s", tc.explains, rep)
			}
		})
	}
}
