package nodeid

import (
	"os"
	"strings"
	"testing"
)

// The id is the boot id and the pid namespace, not the host name.
func TestIDIsBootAndPidNamespace(t *testing.T) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skip("no boot id:", err)
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Skip("no pid namespace link:", err)
	}
	want := strings.TrimSpace(string(boot)) + "/" + ns
	if got := ID(); got != want {
		t.Fatalf("ID() = %q, want %q", got, want)
	}
	if h, _ := os.Hostname(); h != "" && strings.Contains(ID(), h) {
		t.Fatalf("ID() = %q contains the host name %q", ID(), h)
	}
}
