package client

import (
	"errors"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// GetResult is one object read: its size, or an error with its ErrorCode.
type GetResult struct {
	Size uint64
	Err  error
}

// Allocator provides the destination for the i-th key's object, of n
// bytes (used when the caller does not know the size in advance). It is
// called at most once per key, from several goroutines at once.
type Allocator func(i int, n uint64) ([]Part, error)

// GetInto reads key into parts (their total is the capacity). It returns
// the object's size; an object larger than the capacity is InvalidParams.
func (c *Client) GetInto(key string, parts []Part, zeroCopy bool) GetResult {
	return c.BatchGetInto([]string{key}, [][]Part{parts}, zeroCopy)[0]
}

// BatchGetInto reads several objects with one master round trip.
func (c *Client) BatchGetInto(keys []string, parts [][]Part, zeroCopy bool) []GetResult {
	if len(parts) != len(keys) {
		return fillErr(make([]GetResult, len(keys)), kvstore.InvalidParams)
	}
	return c.batchGet(keys, func(i int, _ string, _ uint64) ([]Part, error) {
		if !validParts(parts[i]) {
			return nil, kvstore.InvalidParams
		}
		return parts[i], nil
	}, zeroCopy)
}

// minDirectCopyingRead is the smallest object a copying get reads
// without staging.
const minDirectCopyingRead = 256 << 10

// BatchGet reads several objects into memory from alloc (the copying
// get): objects under minDirectCopyingRead are staged through the local
// buffer, larger ones read into alloc's memory directly.
func (c *Client) BatchGet(keys []string, alloc Allocator) []GetResult {
	return c.batchGet(keys, func(i int, _ string, n uint64) ([]Part, error) { return alloc(i, n) }, false)
}

// SizedAllocator provides the destinations of a whole batch at once:
// sizes[i] is the i-th key's object size, or -1 where the key will not be
// read (its result says why); dests[i] receives that object (nil where
// sizes[i] is -1, or to fail that key with InternalError). It is called
// once, on the goroutine that called BatchGetSized, before any object is
// read, so a caller from C gets it on its own thread.
type SizedAllocator func(sizes []int64, dests [][]Part)

// BatchGetSized is the copying get with one allocation call for the whole
// batch (BatchGet asks for each key's memory from the goroutine reading
// it): after the master's answer it hands every found object's size to
// alloc, then reads the objects in parallel as BatchGet does.
func (c *Client) BatchGetSized(keys []string, alloc SizedAllocator) []GetResult {
	out := make([]GetResult, len(keys))
	defer c.trace.api("get", keys, 0).endResults(out)
	if !c.life.Enter() {
		return fillErr(out, kvstore.InvalidParams)
	}
	defer c.life.Exit()
	lists, queried := c.replicaLists(keys)
	sizes := make([]int64, len(keys))
	for i, list := range lists {
		sizes[i] = -1
		if kvstore.ErrorCode(list.GetErrorCode()) == kvstore.OK {
			if reps := c.readOrder(list.Replicas); len(reps) > 0 {
				sizes[i] = int64(reps[0].Size)
			}
		}
	}
	dests := make([][]Part, len(keys))
	alloc(sizes, dests)
	parallel(len(keys), func(i int) error {
		out[i] = c.readObject(keys[i], lists[i], queried, func(uint64) ([]Part, error) {
			if dests[i] == nil {
				return nil, kvstore.InternalError
			}
			return dests[i], nil
		}, false)
		return nil
	})
	return out
}

func (c *Client) batchGet(keys []string, dest func(i int, key string, n uint64) ([]Part, error), zeroCopy bool) []GetResult {
	out := make([]GetResult, len(keys))
	defer c.trace.api("get", keys, 0).endResults(out)
	if !c.life.Enter() {
		return fillErr(out, kvstore.InvalidParams)
	}
	defer c.life.Exit()
	lists, queried := c.replicaLists(keys)
	parallel(len(keys), func(i int) error {
		out[i] = c.readObject(keys[i], lists[i], queried, func(n uint64) ([]Part, error) { return dest(i, keys[i], n) }, zeroCopy)
		return nil
	})
	return out
}

// ReplicaLists returns each key's readable replicas as the master lists
// them (upstream get_replica_desc), granting read leases as a get does.
func (c *Client) ReplicaLists(keys []string) []*pb.GetReplicaListResponse {
	lists, _ := c.replicaLists(keys)
	return lists
}

// replicaLists asks the master where each key's replicas are (granting
// read leases), noting when it asked.
func (c *Client) replicaLists(keys []string) ([]*pb.GetReplicaListResponse, time.Time) {
	lists := make([]*pb.GetReplicaListResponse, len(keys))
	queried := time.Now()
	if !c.life.Enter() {
		for i := range lists {
			lists[i] = &pb.GetReplicaListResponse{ErrorCode: int32(kvstore.InvalidParams)}
		}
		return lists, queried
	}
	defer c.life.Exit()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().BatchGetReplicaList(ctx, &pb.BatchKeyRequest{Keys: keys})
	for i := range lists {
		if err != nil || i >= len(resp.GetItems()) {
			lists[i] = &pb.GetReplicaListResponse{ErrorCode: int32(kvstore.CodeOf(rpcResult(0, firstNonNil(err, kvstore.RPCFail))))}
		} else {
			lists[i] = resp.Items[i]
		}
	}
	return lists, queried
}

// readObject reads one object given its replica list.
func (c *Client) readObject(key string, list *pb.GetReplicaListResponse, queried time.Time, dest func(n uint64) ([]Part, error), zeroCopy bool) GetResult {
	if code := kvstore.ErrorCode(list.GetErrorCode()); code != kvstore.OK {
		return GetResult{Err: code}
	}
	reps := c.readOrder(list.Replicas)
	if len(reps) == 0 {
		return GetResult{Err: kvstore.ObjectNotFound}
	}
	r := reps[0]
	parts, err := dest(r.Size)
	if err != nil {
		return GetResult{Err: err}
	}
	if partsSize(parts) < r.Size {
		return GetResult{Err: kvstore.InvalidParams}
	}
	// A copying read of a large object lands in the caller's memory
	// directly (registered for the read) rather than through staging
	// chunks: the registration costs less than the extra copy.
	staged := !zeroCopy && r.Size < minDirectCopyingRead
	// A replica whose owner died (and is not expired by the master yet)
	// fails the transfer: fall back to the next replica.
	for i, rep := range reps {
		if err = c.readFrom(parts, rep, r.Size, staged); err == nil || !errors.Is(err, kvstore.TransferFail) {
			break
		}
		if i+1 < len(reps) && reps[i+1].Size != r.Size {
			break
		}
	}
	if err != nil {
		return GetResult{Err: err}
	}
	if leaseExpired(queried, list.LeaseTtlMs) {
		return GetResult{Err: kvstore.LeaseExpired}
	}
	if list.Checksum != nil && checksumEnabled() {
		sum, err := checksum(c.engine.Memory(), trim(parts, r.Size))
		if err != nil {
			return GetResult{Err: transferErr(err)}
		}
		if sum != *list.Checksum {
			return GetResult{Err: kvstore.ChecksumMismatch}
		}
	}
	return GetResult{Size: r.Size}
}

// leaseExpired applies upstream's rule: a read that finishes after the
// lease granted with the replica list ran out fails with LEASE_EXPIRED,
// since the object may have been removed or evicted under it.
func leaseExpired(queried time.Time, ttlMs uint64) bool {
	return ttlMs > 0 && time.Since(queried) >= time.Duration(ttlMs)*time.Millisecond
}

// readOrder lists the complete replicas in the order reads try them: the
// one in this client's own segment first, then the others as listed.
func (c *Client) readOrder(rs []*pb.ReplicaDescriptor) []*pb.ReplicaDescriptor {
	out := make([]*pb.ReplicaDescriptor, 0, len(rs))
	for _, r := range rs {
		if r.Status != pb.ReplicaStatus_REPLICA_COMPLETE {
			continue
		}
		if r.TransportEndpoint == c.engine.Name() {
			out = append([]*pb.ReplicaDescriptor{r}, out...)
		} else {
			out = append(out, r)
		}
	}
	return out
}

// pickReplica prefers a replica in this client's own segment, then the
// first complete one.
func (c *Client) pickReplica(rs []*pb.ReplicaDescriptor) *pb.ReplicaDescriptor {
	var first *pb.ReplicaDescriptor
	for _, r := range rs {
		if r.Status != pb.ReplicaStatus_REPLICA_COMPLETE {
			continue
		}
		if r.TransportEndpoint == c.engine.Name() {
			return r
		}
		if first == nil {
			first = r
		}
	}
	return first
}

// trim cuts parts down to the first n bytes.
func trim(parts []Part, n uint64) []Part {
	var out []Part
	for _, p := range parts {
		if n == 0 {
			break
		}
		m := min(p.Size, n)
		out = append(out, Part{p.Addr, m})
		n -= m
	}
	return out
}

// Range is one ranged read: Size bytes at SrcOffset of object Key into Dst.
type Range struct {
	Key       string
	Dst       uintptr
	SrcOffset uint64
	Size      uint64
}

// GetRanges serves upstream's get_into_ranges: each range reads part of an
// object straight into caller memory. The result per range is the bytes
// read or an error; a range past the object's end is InvalidParams.
func (c *Client) GetRanges(ranges []Range) []GetResult {
	out := make([]GetResult, len(ranges))
	sp := c.trace.api("get_ranges", nil, 0)
	sp.sp.Keys = len(ranges)
	defer sp.endResults(out)
	if !c.life.Enter() {
		return fillErr(out, kvstore.InvalidParams)
	}
	defer c.life.Exit()
	// Every destination is checked before any range moves a byte.
	var keys []string
	at := map[string]int{}
	for i, r := range ranges {
		if !c.destinationFits(r.Dst, r.Size) {
			out[i].Err = kvstore.InvalidParams
			continue
		}
		if _, ok := at[r.Key]; !ok {
			at[r.Key] = len(keys)
			keys = append(keys, r.Key)
		}
	}
	lists, queried := c.replicaLists(keys)
	parallel(len(ranges), func(i int) error {
		rg := ranges[i]
		if out[i].Err != nil {
			return nil
		}
		list := lists[at[rg.Key]]
		if code := kvstore.ErrorCode(list.GetErrorCode()); code != kvstore.OK {
			out[i].Err = code
			return nil
		}
		reps := c.readOrder(list.Replicas)
		switch {
		case len(reps) == 0:
			out[i].Err = kvstore.ObjectNotFound
		case rg.Dst == 0 && rg.Size > 0:
			out[i].Err = kvstore.InvalidParams
		case rg.SrcOffset > reps[0].Size || rg.Size > reps[0].Size-rg.SrcOffset:
			out[i].Err = kvstore.InvalidParams
		default:
			var err error
			for _, rep := range reps { // next replica when a transfer fails
				if err = c.readReplica([]Part{{rg.Dst, rg.Size}}, rep, rg.SrcOffset, rg.Size, false); err == nil || !errors.Is(err, kvstore.TransferFail) {
					break
				}
			}
			if err != nil {
				out[i].Err = err
			} else if leaseExpired(queried, list.LeaseTtlMs) {
				out[i].Err = kvstore.LeaseExpired
			} else {
				out[i].Size = rg.Size
			}
		}
		return nil
	})
	return out
}

// destinationFits reports whether n bytes may be written at dst: the range
// does not wrap, and every buffer registered with the engine (by
// register_buffer, or the client's own segments) that it touches holds it
// whole. A range outside every registered buffer is the caller's own
// memory, as for get_into; one that starts in a buffer and runs past its
// end, or starts before it, would write memory nobody handed over.
func (c *Client) destinationFits(dst uintptr, n uint64) bool {
	if n == 0 {
		return true
	}
	if dst+uintptr(n) < dst || uint64(uintptr(n)) != n {
		return false
	}
	c.tempMu.Lock()
	defer c.tempMu.Unlock()
	for _, sp := range c.engine.Overlapping(dst, n) {
		if t := c.temps[sp.Addr]; t != nil && t.size == sp.Length {
			continue // a registration of caller memory for one call (useDirect)
		}
		if dst < sp.Addr || uint64(dst-sp.Addr) > sp.Length || n > sp.Length-uint64(dst-sp.Addr) {
			return false
		}
	}
	return true
}

// fillErr sets every result's error to err.
func fillErr(out []GetResult, err error) []GetResult {
	for i := range out {
		out[i].Err = err
	}
	return out
}
