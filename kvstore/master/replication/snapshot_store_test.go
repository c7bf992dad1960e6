package replication

import (
	"os"
	"reflect"
	"strconv"
	"testing"
)

func TestLocalSnapshotStoreKeepsTheNewest(t *testing.T) {
	root := t.TempDir()
	l, err := openLocalSnapshotStore(root, "c")
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{5, 9, 12} {
		if err := l.save(seq, []byte(strconv.FormatUint(seq, 10))); err != nil {
			t.Fatal(err)
		}
	}
	floor, err := l.prune(2)
	if err != nil || floor != 9 {
		t.Fatalf("prune: oldest kept %d, %v; want 9", floor, err)
	}
	seqs, err := l.list()
	if err != nil || !reflect.DeepEqual(seqs, []uint64{12, 9}) {
		t.Fatalf("list: %v %v", seqs, err)
	}
	fi, err := os.Stat(l.path(12))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file mode %v (%v), want 0600", fi.Mode(), err)
	}
	if di, err := os.Stat(l.dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("store directory mode %v (%v), want 0700", di.Mode(), err)
	}
	if _, err := openLocalSnapshotStore("", "c"); err == nil {
		t.Fatal("a store without a path opened")
	}
}
