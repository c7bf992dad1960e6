package fsdir

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSanitizeFileName(t *testing.T) {
	for in, want := range map[string]string{
		"":           "_",
		".":          "_.",
		"..":         "_..",
		"a/b\\c:d*e": "a_b_c_d_e",
		"?\"<>|\x00": "______",
		"x\ny":       "x_y",
		"plain-key":  "plain-key",
	} {
		if got := SanitizeFileName(in); got != want {
			t.Errorf("SanitizeFileName(%q) = %q, want %q", in, got, want)
		}
	}
	if n := len(SanitizeFileName(strings.Repeat("k", 1000))); n != maxNameKey {
		t.Errorf("long key kept %d bytes", n)
	}
}

func TestRelPathKeepsKeysApart(t *testing.T) {
	a, b := RelPath("a/b", 1), RelPath("a_b", 2)
	if a == b || RelPath("a/b", 1) != a || RelPath("a/b", 3) == a {
		t.Fatalf("paths %q %q", a, b)
	}
	for _, k := range []string{"", ".", "..", "../../etc/passwd", strings.Repeat("/", 300)} {
		if err := ValidRelPath(RelPath(k, 7)); err != nil {
			t.Errorf("RelPath(%q) = %q is not valid: %v", k, RelPath(k, 7), err)
		}
	}
	for _, bad := range []string{"", "a/b", "a/b/c/d", "../b/c", "a/../c", "q/a/c", "a/a/..", "a/a/.", "a/a/.x", "a/a/x\x00", "/a/a/x", "a//x"} {
		if ValidRelPath(bad) == nil {
			t.Errorf("ValidRelPath(%q) accepted", bad)
		}
	}
}

func TestWriteReadRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	rel := RelPath("key", 1)
	data := []byte("the object bytes")
	if err := WriteFile(dir, rel, data); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, rel))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("stat: %v %v", st, err)
	}
	got := make([]byte, len(data))
	if err := ReadFile(dir, rel, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %q %v", got, err)
	}
	// A size that differs from the file's is refused, not padded.
	if err := ReadFile(dir, rel, make([]byte, len(data)+1)); !errors.Is(err, ErrSize) {
		t.Fatalf("longer read: %v", err)
	}
	// No temporary file is left next to it.
	ents, _ := os.ReadDir(filepath.Dir(filepath.Join(dir, rel)))
	if len(ents) != 1 {
		t.Fatalf("directory holds %v", ents)
	}
	if err := Remove(dir, rel); err != nil {
		t.Fatal(err)
	}
	if err := ReadFile(dir, rel, got); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read after remove: %v", err)
	}
	if err := Remove(dir, rel); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

func TestSymlinksAreNotFollowed(t *testing.T) {
	root := t.TempDir()
	dir, outside := filepath.Join(root, "cluster"), filepath.Join(root, "outside")
	os.MkdirAll(outside, 0o755)
	rel := RelPath("key", 1)
	parts := strings.Split(rel, "/")
	// The first-level directory is a link leading out of dir.
	os.MkdirAll(dir, 0o755)
	if err := os.Symlink(outside, filepath.Join(dir, parts[0])); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(dir, rel, []byte("x")); err == nil {
		t.Fatal("write through a linked directory")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("wrote outside: %v", ents)
	}
	// The file itself is a link to a file outside.
	os.Remove(filepath.Join(dir, parts[0]))
	os.MkdirAll(filepath.Join(dir, parts[0], parts[1]), 0o755)
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("s"), 0o600)
	if err := os.Symlink(secret, filepath.Join(dir, rel)); err != nil {
		t.Fatal(err)
	}
	if err := ReadFile(dir, rel, make([]byte, 1)); err == nil {
		t.Fatal("read through a link")
	}
	if err := WriteFile(dir, rel, []byte("y")); err != nil {
		t.Fatal(err) // the link is replaced, its target untouched
	}
	if b, _ := os.ReadFile(secret); string(b) != "s" {
		t.Fatalf("target changed: %q", b)
	}
}

func FuzzValidRelPath(f *testing.F) {
	for _, s := range []string{"a/b/key.1", "../b/c", "a/a/..", "p/p/x", "a/b/c/d", "q/a/x"} {
		f.Add(s, "key", uint64(1))
	}
	f.Fuzz(func(t *testing.T, rel, key string, id uint64) {
		// Every path RelPath makes is valid, and every valid path stays
		// below the directory.
		if err := ValidRelPath(RelPath(key, id)); err != nil {
			t.Fatalf("RelPath(%q, %d): %v", key, id, err)
		}
		if ValidRelPath(rel) != nil {
			return
		}
		clean := filepath.Clean("/d/" + rel)
		if !strings.HasPrefix(clean, "/d/") || clean != "/d/"+rel {
			t.Fatalf("valid path %q escapes: %q", rel, clean)
		}
	})
}
