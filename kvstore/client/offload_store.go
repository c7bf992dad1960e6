package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/internal/durablefile"
	"github.com/mooncake-go/mooncake/kvstore"
)

// This file is the disk tier's file storage (upstream's bucket storage
// backend): objects are written in batches, each batch as one bucket of
// two files in the storage directory,
//
//	<id>.bucket  the records, key bytes then value bytes, concatenated
//	<id>.meta    JSON: for every record its key, offsets, sizes and CRC-32C
//
// A bucket is published by the rename of its .meta file, after the
// .bucket file and the .meta file were each written under a temporary
// name and fsync'd (and the directory is fsync'd after the renames), so a
// crash at any point leaves either a whole bucket or none: on open,
// temporary files and .bucket files without a .meta are deleted. Ids grow
// with time, so the smallest id is the oldest bucket. Every read checks
// the record's CRC-32C.

// storeLimits bound the storage (MOONCAKE_OFFLOAD_* variables).
type storeLimits struct {
	BucketKeys   int    // records per bucket
	BucketBytes  uint64 // value bytes per bucket (a larger object is alone)
	TotalKeys    int    // records in all buckets
	TotalBytes   uint64 // value bytes in all buckets
	Evict        bool   // make room by dropping whole buckets
	EvictLRU     bool   // least recently read bucket first (else oldest)
	DiskCapacity uint64 // reported to the master
}

// diskRecord is one object in a bucket, as its .meta file lists it.
type diskRecord struct {
	Key    string `json:"key"`
	Offset uint64 `json:"offset"` // of the value in the .bucket file
	Size   uint64 `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

// bucketMeta is a .meta file.
type bucketMeta struct {
	Version int          `json:"version"`
	Records []diskRecord `json:"records"`
}

// bucket is a published bucket and which of its records are live.
type bucket struct {
	id       uint64
	records  []diskRecord
	live     map[string]bool
	lastRead time.Time
}

// liveBytes is the size of the bucket's live values.
func (b *bucket) liveBytes() uint64 {
	var n uint64
	for _, r := range b.records {
		if b.live[r.Key] {
			n += r.Size
		}
	}
	return n
}

// diskItem is an object to write: its key and bytes.
type diskItem struct {
	key  string
	data []byte
}

// bucketStore is the storage of one directory. Safe for concurrent use.
type bucketStore struct {
	dir    string
	limits storeLimits
	lock   *os.File // flock'd: one client per directory

	mu      sync.Mutex
	buckets map[uint64]*bucket
	index   map[string]uint64 // key → bucket id
	bytes   uint64            // live value bytes
	lastID  uint64
	dropped []string // keys evicted or found corrupt, not yet reported
}

// diskCRC is CRC-32C (Castagnoli), which the CPU computes (SSE4.2, ARMv8
// CRC): checking every disk read costs next to nothing.
var diskCRC = crc32.MakeTable(crc32.Castagnoli)

// errDiskFull is an offload the storage cannot take.
var errDiskFull = errors.New("disk tier full")

// openBucketStore opens (and recovers) the storage in dir, which must be
// an existing, writable, absolute directory that is not a symbolic link
// and has no ".." element; no other client may have it open.
func openBucketStore(dir string, limits storeLimits) (*bucketStore, error) {
	if !filepath.IsAbs(dir) || slices.Contains(strings.Split(dir, string(filepath.Separator)), "..") {
		return nil, fmt.Errorf("%w: ssd offload path %q must be absolute, without ..", kvstore.InvalidParams, dir)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: ssd offload path %q is not an existing directory (a symbolic link is refused)", kvstore.InvalidParams, dir)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return nil, fmt.Errorf("%w: ssd offload path %q is not writable: %v", kvstore.InvalidParams, dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: ssd offload path %q: %v", kvstore.InvalidParams, dir, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: ssd offload path %q is in use by another client", kvstore.InvalidParams, dir)
	}
	s := &bucketStore{dir: dir, limits: limits, lock: lock, buckets: map[uint64]*bucket{}, index: map[string]uint64{}}
	if err := s.recover(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close releases the directory.
func (s *bucketStore) close() {
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
}

// recover loads every published bucket and deletes what a crash left
// half-written. A key found in two buckets keeps the newer one.
func (s *bucketStore) recover() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("%w: scan %s: %v", kvstore.InvalidParams, s.dir, err)
	}
	metas := map[uint64]bool{}
	for _, e := range entries {
		if id, ok := bucketID(e.Name(), ".meta"); ok {
			metas[id] = true
		}
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			os.Remove(filepath.Join(s.dir, name))
		} else if id, ok := bucketID(name, ".bucket"); ok && !metas[id] {
			os.Remove(filepath.Join(s.dir, name))
		}
	}
	ids := make([]uint64, 0, len(metas))
	for id := range metas {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		b, err := s.loadBucket(id)
		if err != nil {
			// A bucket whose files do not agree is unusable: drop it.
			os.Remove(s.path(id, ".meta"))
			os.Remove(s.path(id, ".bucket"))
			continue
		}
		s.adopt(b)
		s.lastID = max(s.lastID, id)
	}
	for _, id := range ids {
		if b, ok := s.buckets[id]; ok && len(b.live) == 0 {
			s.removeBucket(id)
		}
	}
	return nil
}

// loadBucket reads and checks one bucket's .meta against its .bucket.
func (s *bucketStore) loadBucket(id uint64) (*bucket, error) {
	raw, err := os.ReadFile(s.path(id, ".meta"))
	if err != nil {
		return nil, err
	}
	var m bucketMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	fi, err := os.Stat(s.path(id, ".bucket"))
	if err != nil {
		return nil, err
	}
	b := &bucket{id: id, records: m.Records, live: map[string]bool{}}
	for _, r := range m.Records {
		if r.Offset+r.Size > uint64(fi.Size()) {
			return nil, fmt.Errorf("bucket %d: record %q past the end of the file", id, r.Key)
		}
		b.live[r.Key] = true
	}
	return b, nil
}

// bucketID parses "<id><suffix>".
func bucketID(name, suffix string) (uint64, bool) {
	if !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	id, err := strconv.ParseUint(strings.TrimSuffix(name, suffix), 10, 64)
	return id, err == nil
}

func (s *bucketStore) path(id uint64, suffix string) string {
	return filepath.Join(s.dir, strconv.FormatUint(id, 10)+suffix)
}

// objects lists every object held, for the master's mount.
func (s *bucketStore) objects() []diskRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []diskRecord
	for _, id := range sortedIDs(s.buckets) {
		b := s.buckets[id]
		for _, r := range b.records {
			if b.live[r.Key] {
				out = append(out, r)
			}
		}
	}
	return out
}

// write stores items, split into buckets by the bucket limits, making
// room by eviction when allowed. It returns one error per item (nil:
// durable, published).
func (s *bucketStore) write(items []diskItem) []error {
	errs := make([]error, len(items))
	for start := 0; start < len(items); {
		end, size := start, uint64(0)
		for end < len(items) && end-start < s.limits.BucketKeys &&
			(end == start || size+uint64(len(items[end].data)) <= s.limits.BucketBytes) {
			size += uint64(len(items[end].data))
			end++
		}
		err := s.writeBucket(items[start:end])
		for i := start; i < end; i++ {
			errs[i] = err
		}
		start = end
	}
	return errs
}

// writeBucket writes items as one new bucket.
func (s *bucketStore) writeBucket(items []diskItem) error {
	var size uint64
	for _, it := range items {
		size += uint64(len(it.data))
	}
	s.mu.Lock()
	err := s.makeRoom(len(items), size)
	id := max(uint64(time.Now().UnixNano()), s.lastID+1)
	s.lastID = id
	s.mu.Unlock()
	if err != nil {
		return err
	}
	b := &bucket{id: id, live: map[string]bool{}}
	var data []byte
	for _, it := range items {
		data = append(data, it.key...)
		b.records = append(b.records, diskRecord{Key: it.key, Offset: uint64(len(data)), Size: uint64(len(it.data)),
			CRC32C: crc32.Checksum(it.data, diskCRC)})
		data = append(data, it.data...)
		b.live[it.key] = true
	}
	meta, _ := json.Marshal(bucketMeta{Version: 1, Records: b.records})
	if err := s.publish(id, data, meta); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adopt(b)
	return nil
}

// adopt indexes a published bucket; a key it holds replaces the key's
// record in an older bucket. The caller holds mu (or is recovering).
func (s *bucketStore) adopt(b *bucket) {
	for _, r := range b.records {
		if old, ok := s.index[r.Key]; ok {
			s.unlink(old, r.Key)
		}
		s.index[r.Key] = b.id
		s.bytes += r.Size
	}
	s.buckets[b.id] = b
}

// makeRoom evicts buckets until n more records of size bytes fit; the
// caller holds mu. errDiskFull when they cannot.
func (s *bucketStore) makeRoom(n int, size uint64) error {
	fits := func() bool {
		return len(s.index)+n <= s.limits.TotalKeys && s.bytes+size <= s.limits.TotalBytes
	}
	if n > s.limits.TotalKeys || size > s.limits.TotalBytes {
		return fmt.Errorf("%w: %d objects of %d bytes exceed the limits", errDiskFull, n, size)
	}
	for !fits() {
		if !s.limits.Evict || len(s.buckets) == 0 {
			return fmt.Errorf("%w: %d bytes held, limit %d", errDiskFull, s.bytes, s.limits.TotalBytes)
		}
		victim := s.victim()
		for key, live := range s.buckets[victim].live {
			if live {
				s.dropped = append(s.dropped, key)
				delete(s.index, key)
			}
		}
		s.bytes -= s.buckets[victim].liveBytes()
		s.removeBucket(victim)
	}
	return nil
}

// victim is the bucket eviction takes: the oldest, or with LRU the one
// read least recently (never read counts as read when written).
func (s *bucketStore) victim() uint64 {
	ids := sortedIDs(s.buckets)
	if !s.limits.EvictLRU {
		return ids[0]
	}
	best := ids[0]
	for _, id := range ids[1:] {
		if lastUse(s.buckets[id]).Before(lastUse(s.buckets[best])) {
			best = id
		}
	}
	return best
}

func lastUse(b *bucket) time.Time {
	if b.lastRead.IsZero() {
		return time.Unix(0, int64(b.id))
	}
	return b.lastRead
}

// publish writes a bucket's two files crash-safely (see the file comment).
func (s *bucketStore) publish(id uint64, data, meta []byte) error {
	if err := writeDurable(s.path(id, ".bucket"), data); err != nil {
		return err
	}
	if err := writeDurable(s.path(id, ".meta"), meta); err != nil {
		os.Remove(s.path(id, ".bucket"))
		return err
	}
	return durablefile.SyncDir(s.dir)
}

// writeDurable writes data to path atomically (durablefile.Write; its
// temporary file ends in ".tmp", which open drops). A full disk is
// errDiskFull.
func writeDurable(path string, data []byte) error {
	err := durablefile.Write(path, data, 0o644)
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("%w: %v", errDiskFull, err)
	}
	return err
}

// read copies key's value into dst (len(dst) must be its size) and checks
// its CRC-32C. A corrupt record is dropped (and reported as dropped);
// OBJECT_NOT_FOUND for a key not held, CHECKSUM_MISMATCH for a bad one.
func (s *bucketStore) read(key string, dst []byte) error {
	s.mu.Lock()
	id, ok := s.index[key]
	var rec diskRecord
	if ok {
		b := s.buckets[id]
		i := slices.IndexFunc(b.records, func(r diskRecord) bool { return r.Key == key })
		rec = b.records[i]
		b.lastRead = time.Now()
	}
	s.mu.Unlock()
	if !ok {
		return kvstore.ObjectNotFound
	}
	if rec.Size != uint64(len(dst)) {
		return fmt.Errorf("%w: %q holds %d bytes on disk, %d asked", kvstore.InvalidParams, key, rec.Size, len(dst))
	}
	f, err := os.Open(s.path(id, ".bucket"))
	if err == nil {
		_, err = f.ReadAt(dst, int64(rec.Offset))
		f.Close()
	}
	if err == nil && crc32.Checksum(dst, diskCRC) == rec.CRC32C {
		return nil
	}
	s.mu.Lock()
	if s.index[key] == id {
		s.dropped = append(s.dropped, key)
		s.unlinkLocked(key)
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: read %q from disk: %v", kvstore.InternalError, key, err)
	}
	return fmt.Errorf("%w: %q failed its disk checksum", kvstore.ChecksumMismatch, key)
}

// remove deletes keys (those not held are ignored).
func (s *bucketStore) remove(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.unlinkLocked(k)
	}
}

// unlinkLocked forgets key; the caller holds mu.
func (s *bucketStore) unlinkLocked(key string) {
	id, ok := s.index[key]
	if !ok {
		return
	}
	delete(s.index, key)
	s.unlink(id, key)
}

// unlink marks key dead in bucket id and rewrites its .meta, or deletes
// the bucket when nothing in it is live any more; the caller holds mu
// and has removed key from the index.
func (s *bucketStore) unlink(id uint64, key string) {
	b, ok := s.buckets[id]
	if !ok || !b.live[key] {
		return
	}
	for _, r := range b.records {
		if r.Key == key {
			s.bytes -= r.Size
		}
	}
	delete(b.live, key)
	if len(b.live) == 0 {
		s.removeBucket(id)
		return
	}
	var recs []diskRecord
	for _, r := range b.records {
		if b.live[r.Key] {
			recs = append(recs, r)
		}
	}
	b.records = recs
	meta, _ := json.Marshal(bucketMeta{Version: 1, Records: recs})
	if writeDurable(s.path(id, ".meta"), meta) == nil {
		durablefile.SyncDir(s.dir)
	}
}

// removeBucket deletes a bucket's files, .meta first (unpublishing it),
// and makes the removal durable, so that a deleted record does not come
// back after a crash.
func (s *bucketStore) removeBucket(id uint64) {
	os.Remove(s.path(id, ".meta"))
	os.Remove(s.path(id, ".bucket"))
	durablefile.SyncDir(s.dir)
	delete(s.buckets, id)
}

// takeDropped returns and clears the keys dropped since the last call.
func (s *bucketStore) takeDropped() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.dropped
	s.dropped = nil
	return out
}

// redrop puts back dropped keys whose report did not reach the master.
func (s *bucketStore) redrop(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped = append(keys, s.dropped...)
}

// usage returns the objects and value bytes held.
func (s *bucketStore) usage() (keys int, bytes uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.index), s.bytes
}

func sortedIDs(m map[uint64]*bucket) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
