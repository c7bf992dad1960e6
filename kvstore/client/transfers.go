package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
	"github.com/mooncake-go/mooncake/transfer"
)

// useDirect makes the caller's parts usable as the local side of
// transfers: ranges not registered yet are registered local-only for the
// duration of the operation (shared, counted, between concurrent
// operations on the same memory). It returns a release function, or
// ok=false when a part cannot be registered (it straddles another
// registration): then the caller stages instead.
func (c *Client) useDirect(parts []Part) (release func(), ok bool) {
	c.tempMu.Lock()
	defer c.tempMu.Unlock()
	var held []*tempReg
	for _, p := range parts {
		if p.Size == 0 {
			continue
		}
		if t := c.tempCovering(p); t != nil {
			t.refs++
			held = append(held, t)
			continue
		}
		if c.engine.IsRegistered(p.Addr, p.Size) {
			continue // registered by the user (register_buffer)
		}
		if err := c.engine.RegisterLocalOnly(p.Addr, p.Size); err != nil {
			c.dropTemps(held)
			return nil, false
		}
		t := &tempReg{addr: p.Addr, size: p.Size, refs: 1}
		c.temps[p.Addr] = t
		held = append(held, t)
	}
	return func() {
		c.tempMu.Lock()
		defer c.tempMu.Unlock()
		c.dropTemps(held)
	}, true
}

// dropTemps releases held registrations; the caller holds tempMu.
func (c *Client) dropTemps(held []*tempReg) {
	for _, t := range held {
		if t.refs--; t.refs == 0 {
			c.engine.UnregisterLocalMemory(t.addr)
			delete(c.temps, t.addr)
		}
	}
}

// tempReg is a registration useDirect made for operations in flight.
type tempReg struct {
	addr uintptr
	size uint64
	refs int
}

// tempCovering returns the temporary registration holding all of p.
func (c *Client) tempCovering(p Part) *tempReg {
	for _, t := range c.temps {
		if p.Addr >= t.addr && p.Addr-t.addr+uintptr(p.Size) <= uintptr(t.size) {
			return t
		}
	}
	return nil
}

// moveDirect moves the object between the caller's parts and one replica.
func (c *Client) moveDirect(op transfer.Opcode, parts []Part, r *pb.ReplicaDescriptor, objOff uint64) error {
	reqs := make([]transfer.Request, 0, len(parts))
	off := objOff
	for _, p := range parts {
		if p.Size > 0 {
			reqs = append(reqs, transfer.Request{Opcode: op, Source: p.Addr, TargetOffset: r.BufferAddress + off, Length: p.Size})
		}
		off += p.Size
	}
	if len(reqs) == 0 {
		return nil
	}
	sp := c.trace.phase(transferPhase(op), nil, off-objOff)
	err := c.engine.TransferSync(r.TransportEndpoint, reqs)
	sp.endErr(&err)
	if err != nil {
		return transferErr(err)
	}
	return nil
}

// writeReplicas writes the parts, in order, at object offset objOff of
// every replica.
func (c *Client) writeReplicas(parts []Part, replicas []*pb.ReplicaDescriptor, objOff uint64, staged bool) error {
	if !staged {
		if release, ok := c.useDirect(parts); ok {
			defer release()
			return parallel(len(replicas), func(i int) error { return c.moveDirect(transfer.OpWrite, parts, replicas[i], objOff) })
		}
	}
	return c.staged(partsSize(parts), func(chunk []byte, off uint64) error {
		if err := copyIn(c.engine.Memory(), chunk, parts, off); err != nil {
			return transferErr(err)
		}
		return parallel(len(replicas), func(i int) error {
			return c.moveDirect(transfer.OpWrite, []Part{{gpu.AddrOf(chunk), uint64(len(chunk))}}, replicas[i], objOff+off)
		})
	})
}

// readReplica reads n object bytes starting at objOff from r into parts.
// Disk replicas are read whole by readFrom; here they are NOT_SUPPORTED.
func (c *Client) readReplica(parts []Part, r *pb.ReplicaDescriptor, objOff, n uint64, staged bool) error {
	if r.GetReplicaType() != pb.ReplicaType_REPLICA_MEMORY {
		return fmt.Errorf("%w: range reads of disk replicas", kvstore.NotSupported)
	}
	if !staged {
		// The caller's capacity may exceed the object: read only n bytes,
		// never past the end of the replica's buffer.
		parts = trim(parts, n)
		if release, ok := c.useDirect(parts); ok {
			defer release()
			return c.moveDirect(transfer.OpRead, parts, r, objOff)
		}
	}
	return c.staged(n, func(chunk []byte, off uint64) error {
		if err := c.moveDirect(transfer.OpRead, []Part{{gpu.AddrOf(chunk), uint64(len(chunk))}}, r, objOff+off); err != nil {
			return err
		}
		if err := copyOut(c.engine.Memory(), parts, off, chunk); err != nil {
			return transferErr(err)
		}
		return nil
	})
}

// staged runs fn over n bytes in pieces of one staging chunk (see
// stagingPool: leases of the local buffer cannot starve it).
func (c *Client) staged(n uint64, fn func(chunk []byte, off uint64) error) error {
	if c.staging.size == 0 {
		return kvstore.InvalidParams // no local buffer: zero-copy calls only
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.engine.Timeout())
	defer cancel()
	chunk, err := c.staging.get(ctx, n)
	if err != nil {
		return transferErr(err)
	}
	defer c.staging.put(chunk)
	for off := uint64(0); off < n; off += uint64(len(chunk)) {
		m := min(uint64(len(chunk)), n-off)
		if err := fn(chunk[:m], off); err != nil {
			return err
		}
	}
	return nil
}

// maxParallel bounds the goroutines of one parallel call: a batch of a
// thousand small objects ran a goroutine each, and starting them and
// growing their stacks cost more than the objects' transfers. A transfer
// engine connection carries one request at a time per lane, so more
// concurrent objects than this only wait in its queue.
const maxParallel = 64

// parallel runs fn(0..n-1) on up to maxParallel goroutines and returns the
// first error; every fn runs even when one fails. An fn must not wait for
// another fn of the same call to start.
func parallel(n int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, maxParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				errs[i] = fn(i)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// transferErr reports a failed data movement as TRANSFER_FAIL.
func transferErr(err error) error {
	return &codeError{code: kvstore.TransferFail, err: err}
}

// codeError is an ErrorCode with the cause that produced it.
type codeError struct {
	code kvstore.ErrorCode
	err  error
}

func (e *codeError) Error() string { return e.code.Error() + ": " + e.err.Error() }
func (e *codeError) Unwrap() error { return e.code }
