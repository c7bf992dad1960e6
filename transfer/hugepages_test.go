package transfer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHugePageHelpers(t *testing.T) {
	if !ValidHugePageSize(HugePage2MB) || !ValidHugePageSize(HugePage1GB) || ValidHugePageSize(4096) || ValidHugePageSize(0) {
		t.Fatal("ValidHugePageSize")
	}
	if HugePageShift(HugePage2MB) != 21 || HugePageShift(HugePage1GB) != 30 {
		t.Fatal("HugePageShift")
	}
	if RoundToPages(1, HugePage2MB) != HugePage2MB || RoundToPages(HugePage2MB, HugePage2MB) != HugePage2MB || RoundToPages(HugePage2MB+1, HugePage2MB) != 2*HugePage2MB {
		t.Fatal("RoundToPages")
	}
	dir := t.TempDir()
	old := hugePageSysfs
	hugePageSysfs = dir
	t.Cleanup(func() { hugePageSysfs = old })
	if err := os.MkdirAll(filepath.Join(dir, "hugepages-2048kB"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hugepages-2048kB", "free_hugepages"), []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := FreeHugePages(HugePage2MB); n != 3 {
		t.Fatalf("FreeHugePages = %d", n)
	}
	msg := HugePageShortage(HugePage2MB, 5<<20, nil).Error()
	for _, want := range []string{"3 huge pages of 2048 KiB needed", "3 free", "nr_hugepages"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}

func TestManagedBufferRejectsOtherPageSizes(t *testing.T) {
	e, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.AllocateManagedBufferPages(1<<20, 4096); err == nil {
		t.Fatal("a 4 KiB huge page size was accepted")
	}
}
