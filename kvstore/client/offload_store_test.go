package client

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mooncake-go/mooncake/kvstore"
)

func testLimits() storeLimits {
	return storeLimits{BucketKeys: 2, BucketBytes: 1 << 20, TotalKeys: 100, TotalBytes: 1 << 20, Evict: true}
}

func openTestStore(t *testing.T, dir string, l storeLimits) *bucketStore {
	t.Helper()
	s, err := openBucketStore(dir, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

func items(keys ...string) []diskItem {
	out := make([]diskItem, len(keys))
	for i, k := range keys {
		out[i] = diskItem{key: k, data: bytes.Repeat([]byte(k), 10)}
	}
	return out
}

func mustRead(t *testing.T, s *bucketStore, key string) {
	t.Helper()
	buf := make([]byte, 10*len(key))
	if err := s.read(key, buf); err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	if !bytes.Equal(buf, bytes.Repeat([]byte(key), 10)) {
		t.Fatalf("read %s: wrong bytes %q", key, buf)
	}
}

func keysOf(s *bucketStore) []string {
	var out []string
	for _, r := range s.objects() {
		out = append(out, r.Key)
	}
	slices.Sort(out)
	return out
}

func TestBucketStoreWritesBucketsAndRecovers(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, testLimits())
	for i, err := range s.write(items("a", "bb", "ccc")) {
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
	}
	metas, _ := filepath.Glob(filepath.Join(dir, "*.meta"))
	buckets, _ := filepath.Glob(filepath.Join(dir, "*.bucket"))
	if len(metas) != 2 || len(buckets) != 2 { // 2 keys per bucket
		t.Fatalf("want 2 buckets, got %v %v", metas, buckets)
	}
	s.remove([]string{"a"})
	s.close()

	// A crash mid-write leaves temporary files and an unpublished bucket.
	os.WriteFile(filepath.Join(dir, "99.bucket.tmp"), []byte("partial"), 0o644)
	os.WriteFile(filepath.Join(dir, "98.bucket"), []byte("no meta"), 0o644)
	s2 := openTestStore(t, dir, testLimits())
	if got := keysOf(s2); !slices.Equal(got, []string{"bb", "ccc"}) {
		t.Fatalf("recovered keys %v", got)
	}
	mustRead(t, s2, "bb")
	mustRead(t, s2, "ccc")
	for _, junk := range []string{"99.bucket.tmp", "98.bucket"} {
		if _, err := os.Stat(filepath.Join(dir, junk)); !os.IsNotExist(err) {
			t.Fatalf("%s survived recovery", junk)
		}
	}
}

func TestBucketStoreChecksumCatchesCorruption(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, testLimits())
	s.write(items("key"))
	buckets, _ := filepath.Glob(filepath.Join(dir, "*.bucket"))
	raw, _ := os.ReadFile(buckets[0])
	raw[len(raw)-1] ^= 0xff
	os.WriteFile(buckets[0], raw, 0o644)
	err := s.read("key", make([]byte, 30))
	if !errors.Is(err, kvstore.ChecksumMismatch) {
		t.Fatalf("corrupt read: %v, want CHECKSUM_MISMATCH", err)
	}
	if d := s.takeDropped(); !slices.Equal(d, []string{"key"}) {
		t.Fatalf("dropped %v", d)
	}
	if err := s.read("key", make([]byte, 30)); !errors.Is(err, kvstore.ObjectNotFound) {
		t.Fatalf("read after drop: %v", err)
	}
}

func TestBucketStoreEvictsOldestWhenFull(t *testing.T) {
	l := testLimits()
	l.BucketKeys, l.TotalBytes = 1, 25 // each of a, b, c is 10 bytes
	s := openTestStore(t, t.TempDir(), l)
	for _, k := range []string{"a", "b", "c"} {
		if err := s.write(items(k))[0]; err != nil {
			t.Fatal(err)
		}
	}
	if got := keysOf(s); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("kept %v, want the newest two", got)
	}
	if d := s.takeDropped(); !slices.Equal(d, []string{"a"}) {
		t.Fatalf("dropped %v", d)
	}
}

func TestBucketStoreFullWithoutEviction(t *testing.T) {
	l := testLimits()
	l.TotalBytes, l.Evict = 15, false
	s := openTestStore(t, t.TempDir(), l)
	if err := s.write(items("a"))[0]; err != nil {
		t.Fatal(err)
	}
	if err := s.write(items("b"))[0]; !errors.Is(err, errDiskFull) {
		t.Fatalf("write past the limit: %v, want disk full", err)
	}
	mustRead(t, s, "a")
}

func TestBucketStoreRefusesBadDirectories(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(dir, link)
	for _, bad := range []string{"relative/path", filepath.Join(dir, "missing"), link, dir + "/../x"} {
		if _, err := openBucketStore(bad, testLimits()); !errors.Is(err, kvstore.InvalidParams) {
			t.Errorf("%s: %v, want INVALID_PARAMS", bad, err)
		}
	}
	openTestStore(t, dir, testLimits())
	if _, err := openBucketStore(dir, testLimits()); err == nil {
		t.Fatal("a second store on the same directory was allowed")
	}
}
