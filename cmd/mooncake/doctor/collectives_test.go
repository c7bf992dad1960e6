package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The collectives line names the copying path when MC_PG_CMA=0 or Yama
// forbids every read, and otherwise the path the probe read allows.
func TestCollectivesPath(t *testing.T) {
	if r := checkCollectivesPath(Config{ProcPath: "/proc"}, parseEnviron([]string{"MC_PG_CMA=0"})); !strings.Contains(r.Message, "copy through") || !strings.Contains(r.Message, "MC_PG_CMA=0") {
		t.Errorf("MC_PG_CMA=0: %q", r.Message)
	}
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "sys/kernel/yama"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "sys/kernel/yama/ptrace_scope"), []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := checkCollectivesPath(Config{ProcPath: proc}, parseEnviron(nil)); !strings.Contains(r.Message, "copy through") || !strings.Contains(r.Message, "ptrace_scope=3") {
		t.Errorf("ptrace_scope 3: %q", r.Message)
	}
	r := checkCollectivesPath(Config{ProcPath: "/proc"}, parseEnviron(nil))
	if r.Status != OK {
		t.Errorf("status %s", r.Status)
	}
	if probeRead("/proc", os.Getppid()) == nil && !strings.Contains(r.Message, "process_vm_readv (CMA") {
		t.Errorf("the probe read works but the line says %q", r.Message)
	}
}
