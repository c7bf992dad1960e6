package master

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/fsdir"
)

// This file holds the shared-file-system DISK replicas (upstream's legacy
// --root_fs_dir tier, spec store_ext.md §7.1): with a root directory set,
// every write also gets a DISK replica, a file under
// <root_fs_dir>/<cluster_id> that the writing client fills after its
// memory write and publishes with PutEnd(DISK). Memory eviction keeps it,
// so the object stays readable from the file. The master never touches
// the files' bytes; it records only which file holds which object.

// FSConfig configures the DISK replicas on a shared file system.
type FSConfig struct {
	// RootDir turns the tier on (--root_fs_dir, "" = off). Every client
	// must reach it under the same path (3FS, NFS, or a local directory
	// for processes of one host).
	RootDir string
	// ClusterID names the subdirectory of RootDir this cluster uses
	// (--cluster_id, "mooncake_cluster").
	ClusterID string
	// GlobalFileSegmentSize is the capacity reported for the directory
	// (--global_file_segment_size, math.MaxInt64 = unlimited); it only
	// feeds metrics, nothing is refused for it.
	GlobalFileSegmentSize int64
}

// DefaultFSConfig returns upstream's defaults (tier off).
func DefaultFSConfig() FSConfig {
	return FSConfig{ClusterID: "mooncake_cluster", GlobalFileSegmentSize: math.MaxInt64}
}

// Enabled reports whether writes get DISK replicas.
func (c FSConfig) Enabled() bool { return c.RootDir != "" }

// Dir is the directory the DISK replicas' paths are relative to
// (<root>/<cluster_id>), "" when the tier is off.
func (c FSConfig) Dir() string {
	if !c.Enabled() {
		return ""
	}
	return fsdir.Dir(c.RootDir, c.ClusterID)
}

// fsReplica is an object's DISK replica: the file rel under FSConfig.Dir.
type fsReplica struct {
	status  ReplicaStatus // PROCESSING until the writer's PutEnd(DISK)
	rel     string
	writer  string
	started time.Time
}

// addFSReplica gives o's new write a PROCESSING DISK replica, when the
// tier is on. An earlier file of the object is deleted.
func (s *State) addFSReplica(o *object, clientID string, now time.Time) {
	if !s.cfg.FS.Enabled() {
		return
	}
	s.dropFS(o)
	s.nextReplica++
	o.mdw().fs = &fsReplica{status: ReplicaProcessing, rel: fsdir.RelPath(o.key, s.nextReplica), writer: clientID, started: now}
	s.fsWrites[o] = struct{}{}
}

// fsDescriptor lists o's DISK replica, as PutStart returns it; nil when
// it has none.
func (o *object) fsDescriptor() []Replica {
	if o.md().fs == nil {
		return nil
	}
	return []Replica{{Type: ReplicaDisk, Status: o.md().fs.status, Size: o.size, FilePath: o.md().fs.rel}}
}

// fsReadable reports whether o's DISK replica is written.
func (o *object) fsReadable() bool { return o.md().fs != nil && o.md().fs.status == ReplicaComplete }

// fsPending reports whether o's DISK replica is still being written.
func (o *object) fsPending() bool { return o.md().fs != nil && o.md().fs.status == ReplicaProcessing }

// dropFS forgets o's DISK replica and queues its file for deletion.
func (s *State) dropFS(o *object) {
	if o.md().fs == nil {
		return
	}
	s.disk.fsDeletes = append(s.disk.fsDeletes, o.md().fs.rel)
	o.meta.fs = nil
	delete(s.fsWrites, o)
}

// dropFSProcessing forgets o's DISK replica if it is still being written
// (the write it belongs to is revoked or discarded).
func (s *State) dropFSProcessing(o *object) {
	if o.fsPending() {
		s.dropFS(o)
	}
}

// TakeFSDeletes returns the files (relative to FSConfig.Dir) of DISK
// replicas dropped since the last call; the server deletes them.
func (s *State) TakeFSDeletes() []string {
	out := s.disk.fsDeletes
	s.disk.fsDeletes = nil
	return out
}

// PutEndDisk publishes clientID's DISK replica of key: its file is
// written. A repeat is OK. Errors: OBJECT_NOT_FOUND, ILLEGAL_CLIENT
// (another client's write), INVALID_WRITE (the object has no DISK
// replica).
func (s *State) PutEndDisk(clientID, key string, now time.Time) kvstore.ErrorCode {
	return s.m.result("put_end", s.putEndDisk(clientID, key))
}

func (s *State) putEndDisk(clientID, key string) kvstore.ErrorCode {
	o, ok := s.objects.lookup(key)
	if !ok {
		return kvstore.ObjectNotFound
	}
	if o.md().fs == nil {
		return kvstore.InvalidWrite
	}
	if o.md().fs.writer != clientID {
		return kvstore.IllegalClient
	}
	o.md().fs.status = ReplicaComplete
	delete(s.fsWrites, o)
	s.kvAvailability(o)
	return kvstore.OK
}

// PutRevokeDisk drops clientID's DISK replica of key, whose file could not
// be written; an object left without replicas disappears. Errors as
// PutEndDisk, and INVALID_WRITE for a replica already published.
func (s *State) PutRevokeDisk(clientID, key string, now time.Time) kvstore.ErrorCode {
	return s.m.result("put_revoke", s.putRevokeDisk(clientID, key))
}

func (s *State) putRevokeDisk(clientID, key string) kvstore.ErrorCode {
	o, ok := s.objects.lookup(key)
	if !ok {
		return kvstore.ObjectNotFound
	}
	if o.md().fs == nil || !o.fsPending() {
		return kvstore.InvalidWrite
	}
	if o.md().fs.writer != clientID {
		return kvstore.IllegalClient
	}
	s.dropFS(o)
	if o.gone() && !o.writing {
		s.dropObject(o)
		s.charge(o)
	}
	return kvstore.OK
}

// releaseStaleFS drops DISK replicas left PROCESSING longer than
// PutStartReleaseTimeout (their writer died before PutEnd(DISK)). It
// visits State.fsWrites only (putEndDisk and dropFS take objects out),
// in key order, and forgets any entry whose object left the table.
func (s *State) releaseStaleFS(now time.Time) {
	var stale []*object
	for o := range s.fsWrites {
		switch {
		case !o.fsPending() || s.objects.get(o.key) != o:
			delete(s.fsWrites, o)
		case now.Sub(o.md().fs.started) > s.cfg.PutStartReleaseTimeout:
			stale = append(stale, o)
		}
	}
	slices.SortFunc(stale, func(a, b *object) int { return strings.Compare(a.key, b.key) })
	for _, o := range stale {
		s.dropFS(o)
		if o.gone() && !o.writing {
			s.dropObject(o)
			s.charge(o)
		}
	}
}

// evictMemoryOnly frees o's memory replicas when it has a DISK replica
// (written, or being written by a client that already published memory)
// and reports whether it did: o stays, readable from its file.
func (s *State) evictMemoryOnly(o *object) bool {
	if o.md().fs == nil || len(o.replicas) == 0 {
		return false
	}
	for _, r := range o.replicas {
		s.freeReplica(r)
	}
	o.replicas = nil
	s.charge(o)
	return true
}
