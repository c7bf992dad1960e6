package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestParseRows(t *testing.T) {
	rows, err := parseRows("1+9, 1000+10000")
	if err != nil || len(rows) != 2 || rows[0] != (row{1, 9}) || rows[1] != (row{1000, 10000}) {
		t.Fatalf("parseRows: %v, %v", rows, err)
	}
	for _, bad := range []string{"", "10", "0+5", "a+b", "1+-1"} {
		if _, err := parseRows(bad); err == nil {
			t.Errorf("parseRows(%q) accepted", bad)
		}
	}
}

// TestMeasureAgainstARealMaster runs one small row against a master built
// from this tree: every phase answers, the probe's objects are found and
// the figures are filled in.
func TestMeasureAgainstARealMaster(t *testing.T) {
	res, err := measure(buildMaster(t), row{2, 3}, 1500*time.Millisecond, 50)
	if err != nil {
		t.Fatal(err)
	}
	if res.pingsPerS < 2 || res.put.p50 <= 0 || res.get.p50 <= 0 || res.exist.p50 <= 0 || res.rssMiB <= 0 {
		t.Fatalf("figures missing: %+v", res)
	}
}

// TestFailoverAgainstRealMasters kills the leader of two real masters: the
// probe's put succeeds on the new leader and every client comes back to it.
func TestFailoverAgainstRealMasters(t *testing.T) {
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("no etcd binary on PATH")
	}
	res, err := measureFailover(buildMaster(t), etcd, row{2, 3}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.notBack != 0 || res.firstPut <= 0 || res.backMax < res.back50 {
		t.Fatalf("failover: %+v", res)
	}
}

// buildMaster builds mooncake_master from this tree (skipped with -short).
func buildMaster(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs mooncake_master")
	}
	bin := filepath.Join(t.TempDir(), "mooncake_master")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../../cmd/mooncake_master")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
