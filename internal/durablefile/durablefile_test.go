package durablefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesWholeFileWithItsMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	for _, content := range []string{"first version", "v2"} {
		if err := Write(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode(), err)
	}
	if err := SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	assertOnly(t, dir, "state")
}

// A write that cannot be renamed into place leaves the old state and no
// temporary file.
func TestFailedWriteLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "busy")
	if err := os.MkdirAll(filepath.Join(target, "child"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Write(target, []byte("x"), 0o644); err == nil {
		t.Fatal("renaming a file over a non-empty directory succeeded")
	}
	assertOnly(t, dir, "busy")
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o644); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("directory holds %v, want %v", got, names)
	}
}
