package client

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master"
)

// fsFiles lists the regular files under dir.
func fsFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestFSDiskRoundTripAfterMemoryIsGone(t *testing.T) {
	root := t.TempDir()
	rpc, meta := startMaster(t, func(c *master.Config) { c.FS.RootDir = root })
	storage := newClient(t, rpc, meta, 8<<20, 0)
	writer := newClient(t, rpc, meta, 0, 4<<20)
	reader := newClient(t, rpc, meta, 0, 4<<20)
	srcs := map[string][]byte{"a/b": fillPattern(buf(t, 1<<20), 1), "a_b": fillPattern(buf(t, 1<<20), 2), "..": fillPattern(buf(t, 333), 3)}
	for k, src := range srcs {
		if err := writer.Put(k, part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	writer.Close()  // finishes the file writes
	storage.Close() // the memory replicas are gone
	files := fsFiles(t, filepath.Join(root, "mooncake_cluster"))
	if len(files) != len(srcs) {
		t.Fatalf("files %v", files)
	}
	for k, src := range srcs {
		dst := buf(t, len(src))
		if r := reader.GetInto(k, part(dst), false); r.Err != nil || r.Size != uint64(len(src)) || !bytes.Equal(dst, src) {
			t.Fatalf("get %s from disk: %+v equal=%v", k, r, bytes.Equal(dst, src))
		}
	}
	// A file that no longer holds the object's size is not read.
	for _, f := range files {
		os.Truncate(f, 10)
	}
	dst := buf(t, 1<<20)
	if r := reader.GetInto("a/b", part(dst), false); !errors.Is(r.Err, kvstore.FileNotFound) {
		t.Fatalf("get of a truncated file: %+v", r)
	}
}

func TestFSDiskFailedWriteIsRevoked(t *testing.T) {
	root := t.TempDir()
	// The cluster directory cannot be created: every file write fails.
	if err := os.WriteFile(filepath.Join(root, "mooncake_cluster"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rpc, meta := startMaster(t, func(c *master.Config) { c.FS.RootDir = root })
	storage := newClient(t, rpc, meta, 8<<20, 0)
	writer := newClient(t, rpc, meta, 0, 4<<20)
	reader := newClient(t, rpc, meta, 0, 4<<20)
	src := fillPattern(buf(t, 4096), 7)
	if err := writer.Put("k", part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	writer.Close()
	lists := reader.ReplicaLists([]string{"k"})
	if len(lists[0].GetReplicas()) != 1 || lists[0].Replicas[0].GetFilePath() != "" {
		t.Fatalf("replicas after a failed file write: %+v", lists[0].GetReplicas())
	}
	storage.Close()
	if r := reader.GetInto("k", part(buf(t, 4096)), false); !errors.Is(r.Err, kvstore.ObjectNotFound) {
		t.Fatalf("get with memory gone and no file: %+v", r)
	}
}
