package client

import (
	"errors"
	"sync"
	"time"

	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// The one-round-trip put (docs/design/master-transport.md, "Reserved space"): the
// client reserves a block of a segment from the master, writes each small
// object of a default-placed put into the next unused part of it, and
// records the object with one BatchPutCommit call instead of put start and
// put end. A put is acknowledged only after the master's commit answered.

const (
	// reservedObjectMax is the largest object put through a block; larger
	// ones take the two-phase path, where the round trip matters less.
	reservedObjectMax = 64 << 10
	// blockSize is what the client asks for at a time: 256 objects of
	// 4 KiB between two Reserve calls.
	blockSize = 1 << 20
	// reserveBackoff is how long puts go two-phase after a Reserve failed
	// (no room in the pool, the master unreachable).
	reserveBackoff = time.Second
)

// reserver hands out the space of the client's blocks. It is safe for
// concurrent use: puts take space under mu and write and commit outside
// it.
type reserver struct {
	mu  sync.Mutex
	off bool // the master refused blocks for good: two-phase only
	gen uint64
	cur *block
	// retired are exhausted blocks with puts in flight; release are those
	// whose puts all finished, given back with the next Reserve call.
	retired []*block
	release []uint64
	// reserving is set while one put asks for a new block; the others
	// take the two-phase path meanwhile instead of waiting.
	reserving bool
	// retryAt: after a Reserve that failed, none is sent before it.
	retryAt time.Time
}

// block is one reservation.
type block struct {
	id       uint64
	desc     *pb.ReplicaDescriptor // the block: address, size, segment
	next     uint64                // bytes handed out
	inflight int                   // puts between take and done
	gone     bool                  // the master no longer knows it
}

// slot is one object's place in a block.
type slot struct {
	blk *block
	off uint64 // from the block's first byte
}

// replica is the slot as the replica descriptor writeReplicas moves
// bytes into.
func (s slot) replica(size uint64) *pb.ReplicaDescriptor {
	return &pb.ReplicaDescriptor{
		Status: pb.ReplicaStatus_REPLICA_PROCESSING, TransportEndpoint: s.blk.desc.GetTransportEndpoint(),
		BufferAddress: s.blk.desc.GetBufferAddress() + s.off, Size: size, SegmentName: s.blk.desc.GetSegmentName(),
	}
}

// take returns one slot per size from the current block, asking the
// master for a new block when it is full (gen is the master connection's
// generation: blocks of an earlier connection are forgotten). ok is false
// when the caller should put the two-phase way: blocks are off, another
// put is reserving, or the master had no block to give.
func (r *reserver) take(c *Client, sizes []uint64) (slots []slot, ok bool) {
	need := uint64(0)
	for _, n := range sizes {
		need += master.AlignUp(n)
	}
	gen := c.master.gen.Load()
	r.mu.Lock()
	if r.gen != gen {
		r.forgetLocked()
		r.gen = gen
	}
	if r.off || need > master.MaxReservationBytes {
		r.mu.Unlock()
		return nil, false
	}
	if r.cur == nil || r.cur.desc.GetSize()-r.cur.next < need {
		if r.reserving || time.Now().Before(r.retryAt) {
			r.mu.Unlock()
			return nil, false
		}
		r.reserving = true
		release := r.release
		r.release = nil
		r.mu.Unlock()
		blk, err := c.reserve(max(need, blockSize), release)
		r.mu.Lock()
		r.reserving = false
		if err != nil {
			if errors.Is(err, errNoBlocks) {
				r.off = true
			}
			// Released or not, the ids go with the next call (the master
			// ignores ids it does not hold); no block is asked for until
			// reserveBackoff has passed, so that a full pool does not add
			// a round trip to every put.
			r.release = append(r.release, release...)
			r.retryAt = time.Now().Add(reserveBackoff)
			r.mu.Unlock()
			return nil, false
		}
		if r.gen != c.master.gen.Load() {
			r.mu.Unlock()
			return nil, false // reconnected meanwhile: the block is the old master's
		}
		r.retire(r.cur)
		r.cur = blk
	}
	b := r.cur
	for _, n := range sizes {
		slots = append(slots, slot{b, b.next})
		b.next += master.AlignUp(n)
	}
	b.inflight += len(sizes)
	r.mu.Unlock()
	return slots, true
}

// retire sets an exhausted block aside until its puts finish.
func (r *reserver) retire(b *block) {
	switch {
	case b == nil || b.gone:
	case b.inflight == 0:
		r.release = append(r.release, b.id)
	default:
		r.retired = append(r.retired, b)
	}
}

// done ends n puts in b. gone marks that the master no longer knows b;
// stop that b should not take more puts (a write into it failed: its
// segment may be gone), so it is given back once its puts finish.
func (r *reserver) done(b *block, n int, gone, stop bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b.inflight -= n
	b.gone = b.gone || gone
	if b == r.cur {
		if b.gone || stop {
			r.cur = nil
			r.retire(b)
		}
		return
	}
	if b.inflight > 0 {
		return
	}
	for i, x := range r.retired {
		if x == b {
			r.retired = append(r.retired[:i], r.retired[i+1:]...)
			if !b.gone {
				r.release = append(r.release, b.id)
			}
			return
		}
	}
}

// forgetLocked drops every block: they belong to a master this client no
// longer talks to (or one that restarted).
func (r *reserver) forgetLocked() {
	if r.cur != nil {
		r.cur.gone = true
	}
	for _, b := range r.retired {
		b.gone = true
	}
	r.cur, r.retired, r.release = nil, nil, nil
}

// forget drops every block (after a remount: the master restarted).
func (r *reserver) forget() {
	r.mu.Lock()
	r.forgetLocked()
	r.mu.Unlock()
}

// releaseAll gives every block back (the client is closing; no put runs).
func (r *reserver) releaseAll(c *Client) {
	r.mu.Lock()
	ids := r.release
	if r.cur != nil && !r.cur.gone {
		ids = append(ids, r.cur.id)
	}
	for _, b := range r.retired {
		if !b.gone {
			ids = append(ids, b.id)
		}
	}
	r.cur, r.retired, r.release = nil, nil, nil
	r.mu.Unlock()
	if len(ids) > 0 {
		c.reserve(0, ids)
	}
}

// errNoBlocks is a master that will not hand out blocks to this client at
// all: an older one (Unimplemented), one with a shared-file-system tier,
// or a tenant with a quota.
var errNoBlocks = errors.New("the master hands out no reserved space")

// reserve asks the master for a block of size bytes (0: only release).
func (c *Client) reserve(size uint64, release []uint64) (*block, error) {
	ctx, cancel := rpcContext()
	resp, err := c.master.client().Reserve(ctx, &pb.ReserveRequest{ClientId: c.id, Size: size, Release: release})
	cancel()
	if status.Code(err) == grpccodes.Unimplemented {
		return nil, errNoBlocks
	}
	if err != nil {
		return nil, err
	}
	code := kvstore.ErrorCode(resp.GetErrorCode())
	switch {
	case code == kvstore.NotSupported && size > 0:
		return nil, errNoBlocks
	case code != kvstore.OK:
		return nil, code
	case size == 0:
		return nil, nil
	case resp.GetBlock().GetSize() == 0:
		return nil, kvstore.RPCFail
	}
	return &block{id: resp.GetReservationId(), desc: resp.GetBlock()}, nil
}

// placesNothing reports whether a put's config leaves placement to the
// master's default, so that a block (placed by default) may hold it.
func placesNothing(p *pb.ReplicateConfig) bool {
	return p.GetReplicaNum() == 1 && len(p.GetPreferredSegments()) == 0 && len(p.GetPreferredOwners()) == 0 &&
		!p.GetPreferAllocInSameNode() && !p.GetPreferLocal() && p.GetRouteTopk() == 0
}

// putReserved puts the objects of starts through a block with one commit
// call when all of them are small; it returns the ones left to the
// two-phase path (all of them when one is large or no block is to be had;
// those whose block the master no longer knows or whose write into it
// failed) and sets errs for the others.
func (c *Client) putReserved(starts []*pb.PutStartRequest, idx []int, parts [][]Part, opt PutOptions, errs []error) ([]*pb.PutStartRequest, []int) {
	// A batch goes through a block whole or not at all: mixed with a
	// large object it stays two-phase, so that no object of the batch is
	// readable (and evictable) before the large one has its space.
	sizes := make([]uint64, len(starts))
	for j, s := range starts {
		if s.Size > reservedObjectMax {
			return starts, idx
		}
		sizes[j] = s.Size
	}
	slots, ok := c.reserved.take(c, sizes)
	if !ok {
		return starts, idx
	}
	blk := slots[0].blk
	commits := make([]*pb.PutCommitRequest, len(starts))
	parallel(len(starts), func(j int) error {
		p := parts[idx[j]]
		if c.writeReplicas(p, []*pb.ReplicaDescriptor{slots[j].replica(sizes[j])}, 0, !opt.ZeroCopy) != nil {
			return nil
		}
		commit := &pb.PutCommitRequest{Put: starts[j], ReservationId: blk.id, Offset: slots[j].off}
		if checksumEnabled() {
			sum, err := checksum(c.engine.Memory(), p)
			if err != nil {
				return nil
			}
			commit.Checksum = &sum
		}
		commits[j] = commit
		return nil
	})
	// An object whose write failed (no commit) is put again the two-phase
	// way, which reports the failure if it persists; its range stays
	// unused until the block, retired, is given back.
	retry := make([]bool, len(starts))
	var req []*pb.PutCommitRequest
	var reqAt []int // positions in starts
	broken := false
	for j, commit := range commits {
		if commit == nil {
			broken, retry[j] = true, true
		} else {
			req = append(req, commit)
			reqAt = append(reqAt, j)
		}
	}
	gone := false
	if len(req) > 0 {
		ctx, cancel := rpcContext()
		resp, err := c.master.client().BatchPutCommit(ctx, &pb.BatchPutCommitRequest{Items: req})
		cancel()
		for n, j := range reqAt {
			i := idx[j]
			switch {
			case err != nil || n >= len(resp.GetErrorCodes()) || n >= len(resp.GetReservationGone()):
				errs[i] = rpcResult(0, firstNonNil(err, kvstore.RPCFail))
			case resp.ReservationGone[n]:
				gone, retry[j] = true, true
			case kvstore.ErrorCode(resp.ErrorCodes[n]) == kvstore.ObjectAlreadyExists:
				errs[i] = nil // a plain put of an existing key succeeds
			default:
				errs[i] = kvstore.ErrorCode(resp.ErrorCodes[n]).Err()
			}
		}
	}
	c.reserved.done(blk, len(starts), gone, broken)
	var restStarts []*pb.PutStartRequest
	var restIdx []int
	for j, again := range retry {
		if again {
			restStarts = append(restStarts, starts[j])
			restIdx = append(restIdx, idx[j])
		}
	}
	return restStarts, restIdx
}
