package client

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
	"github.com/mooncake-go/mooncake/transfer"
)

// This file is a storage client's disk tier (setup with
// enable_ssd_offload): its bucket storage, the offload heartbeat that
// executes the master's offload and promotion work, and the OffloadPeer
// server through which readers fetch its disk replicas.

// defaultOffloadPath is where the tier lives when neither ssd_offload_path
// nor MOONCAKE_OFFLOAD_FILE_STORAGE_PATH names a directory (upstream's).
const defaultOffloadPath = "/data/file_storage"

// diskSide is what a client holds of the disk tier: its own tier (nil
// unless offload is enabled) and connections to peers' offload servers.
type diskSide struct {
	tier  atomic.Pointer[offloadTier]
	peers peerConns
	// rpcReads counts the disk reads this client's offload server served.
	rpcReads atomic.Int64
}

// offloadTier is an enabled disk tier.
type offloadTier struct {
	store    *bucketStore
	srv      *grpc.Server
	endpoint string // host:port of the OffloadPeer server
	base     uintptr
	arena    *arena // over the staging buffer at base, registered with the engine
	gcTTL    time.Duration
	stop     chan struct{} // closed when the tier is unmounted

	mu        sync.Mutex
	batches   map[uint64]*servedBatch
	nextBatch uint64
}

// servedBatch is a disk read waiting for its reader to release it.
type servedBatch struct {
	ptrs    []uintptr
	created time.Time
}

// offloadLimits reads the storage limits from the environment.
func offloadLimits() storeLimits {
	policy := envvars.OffloadBucketEvictionPolicy.Value()
	if policy == "" {
		policy = "fifo"
	}
	evict := true
	if v, ok := envvars.OffloadEnableEviction.Lookup(); ok {
		evict = v == "true" || v == "1"
	}
	total := uint64(envvars.OffloadTotalSizeLimit.Int(2 << 40))
	if m := uint64(envvars.OffloadBucketMaxTotalSize.Int(0)); m > 0 {
		total = min(total, m)
	}
	return storeLimits{
		BucketKeys:  envvars.OffloadBucketKeysLimit.Int(500),
		BucketBytes: uint64(envvars.OffloadBucketSizeLimit.Int(256 << 20)),
		TotalKeys:   envvars.OffloadTotalKeysLimit.Int(10_000_000),
		TotalBytes:  total,
		Evict:       evict && (policy == "fifo" || policy == "lru"),
		EvictLRU:    policy == "lru",
	}
}

// EnableOffload starts this client's disk tier in dir (ssd_offload_path;
// "" means MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, else /data/file_storage):
// it opens the storage (recovering what a crash left), starts the offload
// server, mounts the disk with the master announcing the objects already
// there, and starts the offload heartbeat. A master without
// --enable_offload answers UNABLE_OFFLOAD (-1300).
func (c *Client) EnableOffload(dir string) error {
	if !c.life.Enter() {
		return errClientClosed
	}
	defer c.life.Exit()
	if c.disk.tier.Load() != nil {
		return fmt.Errorf("%w: ssd offload is enabled already", kvstore.InvalidParams)
	}
	if b := envvars.OffloadBackend.Value(); b != "" && b != "bucket_storage_backend" {
		return fmt.Errorf("%w: MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR=%s is not supported (only bucket_storage_backend)", kvstore.NotSupported, b)
	}
	if dir == "" {
		dir = envvars.OffloadFileStoragePath.Value()
	}
	if dir == "" {
		dir = defaultOffloadPath
	}
	store, err := openBucketStore(dir, offloadLimits())
	if err != nil {
		return err
	}
	t, err := c.startOffloadServer(store)
	if err != nil {
		store.close()
		return err
	}
	if err := c.mountDisk(t); err != nil {
		c.stopOffloadServer(t)
		return err
	}
	c.disk.tier.Store(t)
	c.wg.Add(2)
	go c.offloadHeartbeat(t)
	go c.sweepServedBatches(t)
	return nil
}

// startOffloadServer allocates the staging buffer and serves OffloadPeer
// on an OS-chosen port of this client's host.
func (c *Client) startOffloadServer(store *bucketStore) (*offloadTier, error) {
	size := uint64(envvars.OffloadLocalBufferSize.Int(1280 << 20))
	base, err := c.engine.AllocateManagedBuffer(size)
	if err != nil {
		return nil, fmt.Errorf("%w: offload buffer of %d bytes: %v", kvstore.InvalidParams, size, err)
	}
	host, _, _ := net.SplitHostPort(c.hostname)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		c.engine.FreeManagedBuffer(base)
		return nil, fmt.Errorf("%w: offload server: %v", kvstore.InvalidParams, err)
	}
	t := &offloadTier{store: store, srv: grpc.NewServer(), endpoint: ln.Addr().String(), base: base,
		arena: newArena(mem(base, size)), batches: map[uint64]*servedBatch{}, stop: make(chan struct{}),
		gcTTL: time.Duration(envvars.OffloadBufferGCTTLMs.Int(5000)) * time.Millisecond}
	pb.RegisterOffloadPeerServer(t.srv, offloadPeer{c: c, t: t})
	go t.srv.Serve(ln)
	return t, nil
}

// stopOffloadServer releases what startOffloadServer took.
func (c *Client) stopOffloadServer(t *offloadTier) {
	t.srv.Stop()
	c.engine.FreeManagedBuffer(t.base)
	t.store.close()
}

// mountDisk registers the disk with the master, announcing its objects;
// those the master refuses are deleted.
func (c *Client) mountDisk(t *offloadTier) error {
	held := t.store.objects()
	objs := make([]*pb.DiskObject, len(held))
	for i, r := range held {
		objs[i] = &pb.DiskObject{Key: r.Key, Size: r.Size}
	}
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.disk().MountLocalDiskSegment(ctx, &pb.MountLocalDiskSegmentRequest{
		ClientId: c.id, Endpoint: t.endpoint, CapacityBytes: t.store.limits.TotalBytes, Objects: objs})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return fmt.Errorf("mount local disk segment: %w", err)
	}
	var refused []string
	for _, i := range resp.GetRejected() {
		if int(i) < len(held) {
			refused = append(refused, held[i].Key)
		}
	}
	t.store.remove(refused)
	return nil
}

// closeOffload unmounts the disk and stops the tier (at Close, after the
// heartbeat has stopped). The files stay: a client set up on the same
// directory announces them again.
func (c *Client) closeOffload() {
	if t := c.disk.tier.Swap(nil); t != nil {
		c.unmountDisk(t)
		c.stopOffloadServer(t)
	}
	c.disk.peers.close()
}

// unmountDisk tells the master to forget the disk and stops the tier's
// heartbeat.
func (c *Client) unmountDisk(t *offloadTier) error {
	close(t.stop)
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.disk().UnmountLocalDiskSegment(ctx, &pb.UnmountLocalDiskSegmentRequest{ClientId: c.id})
	return rpcResult(resp.GetErrorCode(), err)
}

// UnmountLocalDisk is upstream's unmount_local_disk_segment: the master
// stops naming this client as a disk replica holder at once, reads
// already handed a location are served for grace more, then the tier
// stops (its files stay, for a later setup on the directory). Without a
// disk tier it is a no-op.
func (c *Client) UnmountLocalDisk(grace time.Duration) error {
	if !c.life.Enter() {
		return errClientClosed
	}
	defer c.life.Exit()
	t := c.disk.tier.Swap(nil)
	if t == nil {
		return nil
	}
	err := c.unmountDisk(t)
	if grace <= 0 {
		c.stopOffloadServer(t)
		return err
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		select {
		case <-time.After(grace):
		case <-c.stop:
		}
		c.stopOffloadServer(t)
	}()
	return err
}

// offloadHeartbeat runs the disk's heartbeat every
// MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS until Close.
func (c *Client) offloadHeartbeat(t *offloadTier) {
	c.everyUntilStopped(t, envvars.OffloadHeartbeatInterval.Duration(10*time.Second), func(time.Time) { c.diskHeartbeat(t) })
}

// everyUntilStopped calls f every interval until the client closes or
// the tier stops, then marks the goroutine done.
func (c *Client) everyUntilStopped(t *offloadTier, interval time.Duration, f func(now time.Time)) {
	defer c.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.stop:
			return
		case now := <-tick.C:
			f(now)
		}
	}
}

// diskHeartbeat reports what the disk dropped, then does the work the
// master hands out: deletes, then offloads (one batch of buckets), then
// promotions, reporting each outcome.
func (c *Client) diskHeartbeat(t *offloadTier) {
	dropped := t.store.takeDropped()
	ctx, cancel := rpcContext()
	resp, err := c.master.disk().OffloadHeartbeat(ctx, &pb.OffloadHeartbeatRequest{ClientId: c.id, Dropped: dropped})
	cancel()
	if err != nil {
		t.store.redrop(dropped)
		return
	}
	if kvstore.ErrorCode(resp.GetErrorCode()) == kvstore.SegmentNotFound {
		// The master restarted or expired this client: mount again. The
		// metadata store may have restarted with it: readers find the
		// staging buffer only once the engine's segment is published.
		if err := c.engine.Republish(); err != nil {
			slog.Warn("store client: republishing the transfer engine segment failed", "err", err)
		}
		if err := c.mountDisk(t); err != nil {
			slog.Warn("store client: remounting the local disk failed", "err", err)
		}
		return
	}
	t.store.remove(resp.GetDeletes())
	c.runOffloads(t, resp.GetOffload())
	for _, p := range resp.GetPromotions() {
		err := c.promote(t, p)
		if err != nil {
			slog.Warn("store client: promotion failed", "key", p.GetKey(), "err", err)
		}
		ctx, cancel := rpcContext()
		c.master.disk().NotifyPromotionResult(ctx, &pb.NotifyPromotionResultRequest{
			ClientId: c.id, Key: p.GetKey(), ReplicaId: p.GetTarget().GetId(), Success: err == nil})
		cancel()
	}
}

// runOffloads writes the objects of tasks, read from this client's own
// memory replicas, to the disk and reports the outcomes.
func (c *Client) runOffloads(t *offloadTier, tasks []*pb.OffloadTask) {
	if len(tasks) == 0 {
		return
	}
	results := make([]*pb.OffloadResult, len(tasks))
	var items []diskItem
	var at []int
	for i, task := range tasks {
		results[i] = &pb.OffloadResult{Key: task.GetKey()}
		src := task.GetSource()
		if !c.ownsRange(src.GetBufferAddress(), task.GetSize()) || task.GetSize() > t.arena.size {
			continue // not ours, or too large to be read back through the staging buffer
		}
		items = append(items, diskItem{key: task.GetKey(), data: mem(uintptr(src.GetBufferAddress()), task.GetSize())})
		at = append(at, i)
	}
	for j, err := range t.store.write(items) {
		results[at[j]].Success = err == nil
		if err != nil {
			slog.Warn("store client: offload failed", "key", items[j].key, "err", err)
		}
	}
	ctx, cancel := rpcContext()
	defer cancel()
	c.master.disk().NotifyOffloadResult(ctx, &pb.NotifyOffloadResultRequest{ClientId: c.id, Results: results})
}

// promote copies p's object from the disk into its memory replica.
func (c *Client) promote(t *offloadTier, p *pb.PromotionTask) error {
	ctx, cancel := rpcContext()
	buf, err := t.arena.alloc(ctx, max(p.GetSize(), 1), 64)
	cancel()
	if err != nil {
		return err
	}
	defer t.arena.release(buf)
	if err := t.store.read(p.GetKey(), mem(buf, p.GetSize())); err != nil {
		return err
	}
	return c.moveDirect(transfer.OpWrite, []Part{{buf, p.GetSize()}}, p.GetTarget(), 0)
}

// sweepServedBatches frees disk reads their readers did not release
// within the GC TTL, every MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_INTERVAL_SECONDS.
func (c *Client) sweepServedBatches(t *offloadTier) {
	c.everyUntilStopped(t, envvars.OffloadBufferGCInterval.Duration(time.Second), func(now time.Time) {
		t.mu.Lock()
		defer t.mu.Unlock()
		for id, b := range t.batches {
			if now.Sub(b.created) >= t.gcTTL {
				t.freeBatch(id)
			}
		}
	})
}

// freeBatch releases a served batch; the caller holds mu.
func (t *offloadTier) freeBatch(id uint64) bool {
	b, ok := t.batches[id]
	if !ok {
		return false
	}
	for _, p := range b.ptrs {
		t.arena.release(p)
	}
	delete(t.batches, id)
	return true
}

// offloadPeer serves pb.OffloadPeerServer for one tier.
type offloadPeer struct {
	pb.UnimplementedOffloadPeerServer
	c *Client
	t *offloadTier
}

// BatchGetOffloadObject implements pb.OffloadPeerServer: it loads each
// object into the staging buffer, checking its CRC.
func (p offloadPeer) BatchGetOffloadObject(ctx context.Context, req *pb.BatchGetOffloadObjectRequest) (*pb.BatchGetOffloadObjectResponse, error) {
	keys, sizes := req.GetKeys(), req.GetSizes()
	if len(keys) != len(sizes) {
		return &pb.BatchGetOffloadObjectResponse{ErrorCode: int32(kvstore.InvalidParams)}, nil
	}
	resp := &pb.BatchGetOffloadObjectResponse{TransferEngineAddr: p.c.engine.Name(), GcTtlMs: uint64(p.t.gcTTL / time.Millisecond)}
	b := &servedBatch{created: time.Now()}
	for i, key := range keys {
		ptr, err := p.t.arena.alloc(ctx, max(sizes[i], 1), 64)
		if err == nil {
			if err = p.t.store.read(key, mem(ptr, sizes[i])); err != nil {
				p.t.arena.release(ptr)
			}
		}
		if err != nil {
			resp.Pointers = append(resp.Pointers, 0)
			resp.ErrorCodes = append(resp.ErrorCodes, int32(kvstore.CodeOf(err)))
			continue
		}
		b.ptrs = append(b.ptrs, ptr)
		resp.Pointers = append(resp.Pointers, uint64(ptr))
		resp.ErrorCodes = append(resp.ErrorCodes, 0)
		p.c.disk.rpcReads.Add(1)
	}
	p.t.mu.Lock()
	p.t.nextBatch++
	resp.BatchId = p.t.nextBatch
	p.t.batches[resp.BatchId] = b
	p.t.mu.Unlock()
	return resp, nil
}

// ReleaseOffloadBuffer implements pb.OffloadPeerServer.
func (p offloadPeer) ReleaseOffloadBuffer(_ context.Context, req *pb.ReleaseOffloadBufferRequest) (*pb.StatusResponse, error) {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	if !p.t.freeBatch(req.GetBatchId()) {
		return &pb.StatusResponse{ErrorCode: int32(kvstore.ObjectNotFound)}, nil
	}
	return &pb.StatusResponse{}, nil
}

// OffloadRPCReadCount is how many disk reads this client's offload server
// has served (upstream get_offload_rpc_read_count).
func (c *Client) OffloadRPCReadCount() int64 { return c.disk.rpcReads.Load() }
