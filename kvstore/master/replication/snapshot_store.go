package replication

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/internal/durablefile"
)

// localSnapshotStore keeps snapshot files in one directory the master
// owns (mode 0700; each file 0600): <dir>/snapshot-<seq, 20 digits>.mcsnap.
// A file is written whole or not at all: to a temporary file in the same
// directory, synced, then renamed over its name, and the directory synced.
type localSnapshotStore struct {
	dir string
}

const (
	snapshotFilePrefix = "snapshot-"
	snapshotFileSuffix = ".mcsnap"
)

// openLocalSnapshotStore uses (creating it if needed) dir/<cluster_id>.
func openLocalSnapshotStore(root, clusterID string) (*localSnapshotStore, error) {
	if root == "" {
		return nil, fmt.Errorf("snapshot: MOONCAKE_SNAPSHOT_LOCAL_PATH is not set (the directory of the local snapshot store)")
	}
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	dir := filepath.Join(root, clusterID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot: local store: %w", err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("snapshot: local store %s is not a directory", dir)
	}
	return &localSnapshotStore{dir: dir}, nil
}

func (l *localSnapshotStore) path(seq uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%s%020d%s", snapshotFilePrefix, seq, snapshotFileSuffix))
}

// save writes the snapshot of batch seq atomically (mode 0600).
func (l *localSnapshotStore) save(seq uint64, data []byte) error {
	if err := durablefile.Write(l.path(seq), data, 0o600); err != nil {
		return fmt.Errorf("snapshot: write %s: %w", l.path(seq), err)
	}
	_ = durablefile.SyncDir(l.dir)
	return nil
}

// list returns the batch numbers of the stored snapshots, newest first.
func (l *localSnapshotStore) list() ([]uint64, error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	var seqs []uint64
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), snapshotFilePrefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		num, ok := strings.CutSuffix(rest, snapshotFileSuffix)
		if !ok || len(num) != 20 {
			continue
		}
		if seq, err := strconv.ParseUint(num, 10, 64); err == nil {
			seqs = append(seqs, seq)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] > seqs[j] })
	return seqs, nil
}

// load reads the snapshot of batch seq.
func (l *localSnapshotStore) load(seq uint64) ([]byte, error) {
	return os.ReadFile(l.path(seq))
}

// prune deletes all but the newest keep snapshots and returns the batch
// number of the oldest one kept (0 when none is).
func (l *localSnapshotStore) prune(keep int) (uint64, error) {
	seqs, err := l.list()
	if err != nil || len(seqs) == 0 {
		return 0, err
	}
	keep = max(keep, 1)
	for _, seq := range seqs[min(keep, len(seqs)):] {
		if err := os.Remove(l.path(seq)); err != nil && !os.IsNotExist(err) {
			return 0, fmt.Errorf("snapshot: %w", err)
		}
	}
	return seqs[min(keep, len(seqs))-1], nil
}
