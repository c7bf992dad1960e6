package client

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// allocatedSegmentUnit is what AllocateAndMount rounds sizes up to (16 MiB, upstream).
const allocatedSegmentUnit = 16 << 20

// mount is a segment mounted after setup: a mapped file range, or memory
// the client allocated.
type mount struct {
	seg       *pb.Segment
	mapping   []byte // the file mapping (MountFile); nil for allocated memory
	allocated bool
	// draining is set while the segment drains before an unmount with a
	// grace period; grace then fires that unmount.
	draining bool
	grace    *time.Timer
}

// segmentProtocol checks a mount's protocol: this build's engine moves
// bytes over tcp (and shared memory on one host) only.
func segmentProtocol(protocol string) error {
	if protocol != "" && !strings.EqualFold(protocol, "tcp") {
		return fmt.Errorf("%w: protocol %q is not available in this build (tcp only)", kvstore.InvalidParams, protocol)
	}
	return nil
}

// MountFile maps size bytes of the file at path, from offset (a multiple
// of the page size), shared, and mounts them as a segment of this client.
// location is the placement hint of the registered memory ("" = "*").
// It returns the new segment's id; on failure nothing stays mapped.
func (c *Client) MountFile(path string, size, offset uint64, protocol, location string) ([]string, error) {
	if !c.life.Enter() {
		return nil, errClientClosed
	}
	defer c.life.Exit()
	if err := segmentProtocol(protocol); err != nil {
		return nil, err
	}
	page := uint64(os.Getpagesize())
	if size == 0 || offset%page != 0 {
		return nil, fmt.Errorf("%w: size must be positive and offset a multiple of %d", kvstore.InvalidParams, page)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", kvstore.InvalidParams, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", kvstore.InvalidParams, err)
	}
	if offset+size < offset || offset+size > uint64(st.Size()) {
		return nil, fmt.Errorf("%w: range [%d, %d) is outside %s (%d bytes)", kvstore.InvalidParams, offset, offset+size, path, st.Size())
	}
	m, err := unix.Mmap(int(f.Fd()), int64(offset), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap %s: %v", kvstore.InvalidParams, path, err)
	}
	if err := c.engine.RegisterLocalMemory(gpu.AddrOf(m), size, location); err != nil {
		unix.Munmap(m)
		return nil, fmt.Errorf("%w: register %s: %v", kvstore.InternalError, path, err)
	}
	id, err := c.mountSegment(&mount{mapping: m}, uint64(gpu.AddrOf(m)), size)
	if err != nil {
		c.engine.UnregisterLocalMemory(gpu.AddrOf(m))
		unix.Munmap(m)
		return nil, err
	}
	return []string{id}, nil
}

// AllocateAndMount allocates size bytes (rounded up to 16 MiB) of
// engine-managed memory and mounts it. It returns the segment ids and the
// allocated size. location must be "", "*" or "cpu": the memory is not
// bound to a NUMA node.
func (c *Client) AllocateAndMount(size uint64, protocol, location string) ([]string, uint64, error) {
	if !c.life.Enter() {
		return nil, 0, errClientClosed
	}
	defer c.life.Exit()
	if err := segmentProtocol(protocol); err != nil {
		return nil, 0, err
	}
	if location != "" && location != "*" && location != "cpu" {
		return nil, 0, fmt.Errorf("%w: location %q: allocated segments are not bound to a node (use \"\", \"*\" or \"cpu\")", kvstore.InvalidParams, location)
	}
	if size == 0 || size > 1<<62 {
		return nil, 0, fmt.Errorf("%w: size must be positive", kvstore.InvalidParams)
	}
	size = (size + allocatedSegmentUnit - 1) / allocatedSegmentUnit * allocatedSegmentUnit
	base, err := c.engine.AllocateManagedBuffer(size)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: allocate %d bytes: %v", kvstore.InternalError, size, err)
	}
	id, err := c.mountSegment(&mount{allocated: true}, uint64(base), size)
	if err != nil {
		c.engine.FreeManagedBuffer(base)
		return nil, 0, err
	}
	return []string{id}, size, nil
}

// mountSegment announces registered memory [base, base+size) to the master.
func (c *Client) mountSegment(m *mount, base, size uint64) (string, error) {
	m.seg = c.fleet.stamp(&pb.Segment{Id: newSegmentID(), Name: c.hostname, Base: base, Size: size,
		TeEndpoint: c.engine.Name(), Protocol: "tcp", HostId: c.hostID, Incarnation: incarnation})
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().MountSegment(ctx, &pb.MountSegmentRequest{ClientId: c.id, Segment: m.seg})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return "", fmt.Errorf("mount segment: %w", err)
	}
	c.segMu.Lock()
	defer c.segMu.Unlock()
	c.segments = append(c.segments, m.seg)
	c.mounts[m.seg.Id] = m
	return m.seg.Id, nil
}

// Unmount unmounts segments mounted by MountFile (allocated=false) or
// AllocateAndMount (allocated=true) and releases their memory; objects
// whose only replicas lived there disappear. Every id is processed; the
// first error is returned (an unknown id, or one of the other kind, is
// SEGMENT_NOT_FOUND).
//
// With graceSeconds > 0 each segment is drained instead: the master
// places no new replica on it at once, its objects stay readable, and it
// is unmounted when the grace period ends (or when the client closes).
// Unmount with no grace period unmounts a draining segment at once;
// another grace period for it is INVALID_PARAMS.
func (c *Client) Unmount(ids []string, graceSeconds int64, allocated bool) error {
	if !c.life.Enter() {
		return errClientClosed
	}
	defer c.life.Exit()
	switch {
	case graceSeconds < 0:
		return fmt.Errorf("%w: grace_period_seconds=%d is negative", kvstore.InvalidParams, graceSeconds)
	case len(ids) == 0:
		return fmt.Errorf("%w: no segment ids", kvstore.InvalidParams)
	}
	var first error
	for _, id := range ids {
		var err error
		if graceSeconds > 0 {
			err = c.drainThenUnmount(id, allocated, time.Duration(graceSeconds)*time.Second)
		} else {
			err = c.unmountOne(id, allocated)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// drainThenUnmount drains segment id and schedules its unmount after grace.
// The master RPC runs outside segMu, which the data path also takes.
func (c *Client) drainThenUnmount(id string, allocated bool, grace time.Duration) error {
	c.segMu.Lock()
	m, ok := c.mounts[id]
	switch {
	case !ok || m.allocated != allocated:
		c.segMu.Unlock()
		return fmt.Errorf("%w: segment %q was not mounted by this call family", kvstore.SegmentNotFound, id)
	case m.draining:
		c.segMu.Unlock()
		return fmt.Errorf("%w: segment %q is already draining", kvstore.InvalidParams, id)
	}
	m.draining = true
	c.segMu.Unlock()
	err := c.drain(id)
	c.segMu.Lock()
	defer c.segMu.Unlock()
	switch {
	case c.mounts[id] != m: // unmounted meanwhile
		return nil
	case err != nil:
		m.draining = false
		return err
	}
	m.grace = time.AfterFunc(grace, func() {
		if !c.life.Enter() {
			return // closing: Close unmounts every segment
		}
		defer c.life.Exit()
		if err := c.unmountOne(id, allocated); err != nil {
			slog.Warn("store client: unmount after the grace period failed", "segment", id, "err", err)
		}
	})
	return nil
}

// drain asks the master to close segment id to new allocations.
func (c *Client) drain(id string) error {
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().DrainSegment(ctx, &pb.UnmountSegmentRequest{ClientId: c.id, SegmentId: id})
	return rpcResult(resp.GetErrorCode(), err)
}

// redrain drains again, after a remount, the segments waiting out a grace
// period (a restarted master knows them as open).
func (c *Client) redrain() {
	c.segMu.Lock()
	var ids []string
	for id, m := range c.mounts {
		if m.draining {
			ids = append(ids, id)
		}
	}
	c.segMu.Unlock()
	for _, id := range ids {
		if err := c.drain(id); err != nil {
			slog.Warn("store client: draining again after a remount failed", "segment", id, "err", err)
		}
	}
}

func (c *Client) unmountOne(id string, allocated bool) error {
	c.segMu.Lock()
	m, ok := c.mounts[id]
	if !ok || m.allocated != allocated {
		c.segMu.Unlock()
		return fmt.Errorf("%w: segment %q was not mounted by this call family", kvstore.SegmentNotFound, id)
	}
	delete(c.mounts, id)
	if m.grace != nil {
		m.grace.Stop()
	}
	for i, s := range c.segments {
		if s == m.seg {
			c.segments = append(c.segments[:i], c.segments[i+1:]...)
			break
		}
	}
	c.segMu.Unlock()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().UnmountSegment(ctx, &pb.UnmountSegmentRequest{ClientId: c.id, SegmentId: id})
	// The memory goes whatever the master said: the segment is no longer
	// this client's (a master that lost it has nothing left to drop).
	c.releaseMount(m)
	return rpcResult(resp.GetErrorCode(), err)
}

// releaseSegmentMemory frees the memory behind a segment at Close.
func (c *Client) releaseSegmentMemory(s *pb.Segment) {
	if m, ok := c.mounts[s.Id]; ok {
		delete(c.mounts, s.Id)
		if m.grace != nil {
			m.grace.Stop()
		}
		c.releaseMount(m)
		return
	}
	c.engine.FreeManagedBuffer(uintptr(s.Base))
}

func (c *Client) releaseMount(m *mount) {
	if m.mapping == nil {
		c.engine.FreeManagedBuffer(uintptr(m.seg.Base))
		return
	}
	c.engine.UnregisterLocalMemory(gpu.AddrOf(m.mapping))
	unix.Munmap(m.mapping)
}

// newSegmentID is an id in upstream's segment id form: two decimal u64
// halves of a random UUID, "<u64>-<u64>".
func newSegmentID() string {
	var b [16]byte
	rand.Read(b[:])
	return strconv.FormatUint(binary.BigEndian.Uint64(b[:8]), 10) + "-" + strconv.FormatUint(binary.BigEndian.Uint64(b[8:]), 10)
}

// LocalBuffer is the registered local buffer (base address, size); 0, 0
// without one.
func (c *Client) LocalBuffer() (uintptr, uint64) { return c.arena.base, c.arena.size }

// LocalAlloc takes size bytes of the local buffer aligned to align (a
// power of two), without waiting: ok=false when they are not free. The
// memory is registered already, so zero-copy puts and gets from it need
// no registration. Return it with LocalFree.
func (c *Client) LocalAlloc(size, align uint64) (uintptr, bool) {
	if !c.life.Enter() {
		return 0, false
	}
	defer c.life.Exit()
	return c.arena.tryAlloc(size, max(align, stageAlign))
}

// LocalFree returns memory from LocalAlloc; false if addr is not the start
// of a live allocation.
func (c *Client) LocalFree(addr uintptr) bool { return c.arena.release(addr) }
