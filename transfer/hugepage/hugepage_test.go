package hugepage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHelpers(t *testing.T) {
	if !Valid(Size2MB) || !Valid(Size1GB) || Valid(4096) || Valid(0) {
		t.Fatal("Valid")
	}
	if Shift(Size2MB) != 21 || Shift(Size1GB) != 30 {
		t.Fatal("Shift")
	}
	if RoundUp(1, Size2MB) != Size2MB || RoundUp(Size2MB, Size2MB) != Size2MB || RoundUp(Size2MB+1, Size2MB) != 2*Size2MB {
		t.Fatal("RoundUp")
	}
	dir := t.TempDir()
	old := sysfs
	sysfs = dir
	t.Cleanup(func() { sysfs = old })
	if err := os.MkdirAll(filepath.Join(dir, "hugepages-2048kB"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hugepages-2048kB", "free_hugepages"), []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := Free(Size2MB); n != 3 {
		t.Fatalf("Free = %d", n)
	}
	msg := Shortage(Size2MB, 5<<20, nil).Error()
	for _, want := range []string{"3 huge pages of 2048 KiB needed", "3 free", "nr_hugepages"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}
