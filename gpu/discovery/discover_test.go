package discovery

import (
	"errors"
	"os"
	"testing"
)

// TestDiscover checks Discover against what the machine has: without the
// driver it must say so (ErrNoDriver); with it, every device it lists must
// be described.
func TestDiscover(t *testing.T) {
	inv, err := Discover()
	_, statErr := os.Stat("/dev/nvidiactl")
	switch {
	case errors.Is(err, ErrNoDriver):
		if statErr == nil {
			t.Log("an NVIDIA device node exists but NVML did not load")
		}
		if len(inv.Devices) != 0 {
			t.Fatalf("devices listed without a driver: %+v", inv.Devices)
		}
	case err != nil:
		t.Fatal(err)
	default:
		for _, d := range inv.Devices {
			if d.Name == "" || d.UUID == "" || d.MemoryTotal == 0 {
				t.Fatalf("incomplete device description: %+v", d)
			}
		}
	}
}

func TestCString(t *testing.T) {
	b := []int8{'0', '0', ':', '1', 0, 'x'}
	if got := cString(b); got != "00:1" {
		t.Fatalf("cString = %q", got)
	}
}

func TestSysfsNUMANode(t *testing.T) {
	root := t.TempDir()
	dev := root + "/0000:17:00.0"
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dev+"/numa_node", []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := sysfsNUMANode(root, "00000000:17:00.0"); n != 1 {
		t.Fatalf("NUMA node of 00000000:17:00.0 = %d, want 1", n)
	}
	if n := sysfsNUMANode(root, "00000000:18:00.0"); n != -1 {
		t.Fatalf("NUMA node of an absent device = %d, want -1", n)
	}
}
