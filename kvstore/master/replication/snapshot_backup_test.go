package replication

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"reflect"
	"testing"

	"github.com/mooncake-go/mooncake/internal/testutil"
)

// TestSnapshotBackupDir: with --snapshot_backup_dir every snapshot is
// written to both stores and pruned in both; a restore whose store lost
// its snapshots restores from the backup, and without a backup it
// refuses (fail closed).
func TestSnapshotBackupDir(t *testing.T) {
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir, backup := t.TempDir(), t.TempDir()
	open := func(backupDir string) (*Log, *recorder) {
		t.Helper()
		l, sm := newTestLog()
		if err := l.EnableSnapshots(SnapshotConfig{Restore: true, Retention: 1, Dir: dir, BackupDir: backupDir}); err != nil {
			t.Fatal(err)
		}
		return l, sm
	}
	l, sm := open(backup)
	sm.applied = make([]Entry, 7)
	for _, seq := range []uint64{3, 5} {
		if _, err := l.snap.save(seq, sm.Snapshot(seq, 8), quiet); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range l.snap.stores() {
		if seqs, err := s.list(); err != nil || !reflect.DeepEqual(seqs, []uint64{5}) {
			t.Fatalf("%s holds %v (%v), want the newest snapshot only", s.dir, seqs, err)
		}
	}
	// The log was compacted up to batch 5, and the store lost its file.
	if _, err := cli.Put(ctx, SnapshotKey("test"), "5"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(l.snap.store.path(5)); err != nil {
		t.Fatal(err)
	}
	restored, _ := open(backup)
	st, err := restored.restorePoint(ctx, cli, OplogPrefix("test"))
	if err != nil || st == nil || st.Seq != 5 || st.NextN != 8 {
		t.Fatalf("restore with the backup: %+v, %v; want batch 5 from the backup", st, err)
	}
	alone, _ := open("")
	if _, err := alone.restorePoint(ctx, cli, OplogPrefix("test")); !errors.Is(err, ErrSnapshotNeeded) {
		t.Fatalf("restore without the backup: %v, want ErrSnapshotNeeded", err)
	}
}
