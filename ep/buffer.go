package ep

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/lifecycle"
	"github.com/mooncake-go/mooncake/internal/netaddr"
	"github.com/mooncake-go/mooncake/transfer"
	"github.com/mooncake-go/mooncake/transfer/channel"
)

// Peer is what a rank publishes to the others at rendezvous: its engine's
// segment name and its EP buffer's address there.
type Peer struct {
	Name string `json:"name"`
	Addr uint64 `json:"addr"`
}

// peer is a connected remote rank: the buffer's reference to its segment
// (nil when it could not be opened) and that segment's handle.
type peer struct {
	Peer
	ref *transfer.Segment
	seg transfer.SegmentHandle
	shm bool // reachable by AccessRemote (same host, mapped memfd)
}

// ErrClosed is returned by calls on a Buffer that is closing or closed,
// and by the receives that Close canceled.
var ErrClosed = errors.New("ep: buffer closed")

// Buffer is one rank's EP buffer and its connections to the other ranks.
// Calls on a Buffer are issued one at a time (the Python Buffer is used from
// one thread); a receive may run on another goroutine while the next call's
// send runs, since they use different halves. Close may be called from any
// goroutine at any time (see Close).
type Buffer struct {
	eng   *transfer.Engine
	owned bool // eng was created by NewBuffer and is closed with the buffer
	rank  int
	ranks int
	base  uintptr
	size  int64
	mem   []byte // the whole local EP buffer

	mu    sync.Mutex
	peers []*peer // index = rank; nil before Connect
	half  int     // half the next call uses
	ops   [2]*Op  // the last call on each half
	last  *Op     // the last call

	sendMu  sync.Mutex      // serialises send phases (scratch, send_data)
	scratch []byte          // per-call FP8 staging (send phase only)
	seen    map[Layout]bool // layouts used so far (their signals are cleared on Connect)

	// life admits Connect, every send phase and every receive a caller
	// started; Close frees the memory only once they have all left.
	life lifecycle.Gate
	// stop is set when Close begins: waits return early and sends that
	// have not started are skipped.
	stop atomic.Bool
	// policy is how receives wait for their signals (waitSignal).
	policy channel.Policy
}

// Config configures NewBuffer.
type Config struct {
	Rank, Ranks int
	Bytes       int64
	// Engine is the Transfer Engine to use; nil creates one (P2PHANDSHAKE
	// metadata, LocalHostname) owned by the buffer.
	Engine *transfer.Engine
	// LocalHostname is the address peers reach that engine at; "" chooses
	// the local address of the route to MASTER_ADDR (127.0.0.1 without
	// it). A loopback or wildcard one while MASTER_ADDR is not loopback is
	// refused.
	LocalHostname string
	// DisableP2P makes an engine created here use TCP even to same-host
	// peers (upstream's disable_p2p: no intra-node shortcut).
	DisableP2P bool
}

// NewBuffer allocates the EP buffer (zero-filled memfd memory that
// same-host peers map). Call Connect with every rank's Peer before use.
func NewBuffer(cfg Config) (*Buffer, error) {
	if cfg.Ranks <= 0 || cfg.Rank < 0 || cfg.Rank >= cfg.Ranks {
		return nil, fmt.Errorf("ep: rank %d of %d", cfg.Rank, cfg.Ranks)
	}
	if cfg.Bytes < 0 {
		return nil, fmt.Errorf("ep: negative buffer size %d", cfg.Bytes)
	}
	b := &Buffer{eng: cfg.Engine, rank: cfg.Rank, ranks: cfg.Ranks, size: cfg.Bytes, policy: channel.DefaultPolicy(cfg.Ranks)}
	if b.eng == nil {
		host, err := netaddr.Choose(cfg.LocalHostname, netaddr.TorchMaster(), "MOONCAKE_EP_LOCAL_HOSTNAME")
		if err != nil {
			return nil, fmt.Errorf("ep: engine address: %w", err)
		}
		e, err := transfer.New(transfer.Config{LocalHostname: host, MetadataServer: "P2PHANDSHAKE", ForceTCP: cfg.DisableP2P})
		if err != nil {
			return nil, err
		}
		b.eng, b.owned = e, true
	}
	// A zero-byte buffer is legal (upstream's default); every call then
	// fails its size check. The engine still needs something to publish.
	alloc := uint64(cfg.Bytes)
	if alloc == 0 {
		alloc = 4096
	}
	addr, err := b.eng.AllocateManagedBuffer(alloc)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.base = addr
	b.mem = gpu.HostBytes(addr, alloc)
	return b, nil
}

// Self is what this rank publishes.
func (b *Buffer) Self() Peer { return Peer{Name: b.eng.Name(), Addr: uint64(b.base)} }

// Rank and Ranks describe the group.
func (b *Buffer) Rank() int  { return b.rank }
func (b *Buffer) Ranks() int { return b.ranks }

// Bytes is the EP buffer's size as requested.
func (b *Buffer) Bytes() int64 { return b.size }

// Engine is the Transfer Engine the buffer uses.
func (b *Buffer) Engine() *transfer.Engine { return b.eng }

// Connect opens every peer's segment (peers[i] is rank i's Self). It
// records which peers are reachable through shared memory. Calling it again
// (update_ep_member) reopens the segments and clears all signals, so no
// signal from before the membership change is ever read.
func (b *Buffer) Connect(peers []Peer) error {
	if !b.life.Enter() {
		return ErrClosed
	}
	defer b.life.Exit()
	if len(peers) != b.ranks {
		return fmt.Errorf("ep: %d peers for %d ranks", len(peers), b.ranks)
	}
	ps := make([]*peer, b.ranks)
	for i, p := range peers {
		if i == b.rank {
			ps[i] = &peer{Peer: p, shm: true}
			continue
		}
		ref, err := b.eng.OpenSegment(p.Name)
		if err != nil {
			// A peer that cannot be reached now is left unconnected;
			// waits on it time out like on any dead rank.
			slog.Warn("ep: cannot open peer segment", "rank", i, "name", p.Name, "err", err)
			ps[i] = &peer{Peer: p}
			continue
		}
		pp := &peer{Peer: p, ref: ref, seg: ref.Handle()}
		pp.shm = pp.endpoint().Direct(b.eng, 4)
		ps[i] = pp
	}
	b.mu.Lock()
	old := b.peers
	b.peers = ps
	b.clearSignalsLocked()
	b.mu.Unlock()
	// The new references are open, so a segment both lists share stays.
	releasePeers(old)
	return nil
}

// releasePeers closes the buffer's references to the segments of ps.
func releasePeers(ps []*peer) {
	for _, p := range ps {
		if p != nil && p.ref != nil {
			p.ref.Close()
		}
	}
}

// clearSignalsLocked zeroes both halves' signal arrays of every layout used
// so far (a layout depends on the call's N, H and E). Receivers clear each
// signal once consumed; this catches the ones that arrived late from a rank
// that had been declared dead.
func (b *Buffer) clearSignalsLocked() {
	for l := range b.seen {
		for half := 0; half < 2; half++ {
			off := l.SendSignal(half)
			if off+2*l.Sig <= int64(len(b.mem)) {
				clear(b.mem[off : off+2*l.Sig])
			}
		}
	}
}

// Close shuts the buffer down: open → closing → closed. From the moment it
// starts, calls fail with ErrClosed. Pending receives are canceled: a
// receive waiting for peers (async, or a hook being run) returns within one
// wait interval (at most 20 ms), and one nobody has started yet (a hook
// not called) is completed at once; each gets ErrClosed from Recv or Wait,
// and its output tensors hold whatever had arrived. A deferred send that
// has not started is skipped; one that runs is waited for. Only then is
// the EP buffer freed (and the engine closed, when the buffer created it).
// Concurrent and later calls wait for the first to finish.
func (b *Buffer) Close() error {
	var err error
	b.life.Close(b.cancelPending, func() { err = b.release() })
	return err
}

// cancelPending makes running waits return and completes the receives no
// caller has started, oldest first (a later call's receive waits for the
// earlier one's).
func (b *Buffer) cancelPending() {
	b.stop.Store(true)
	b.mu.Lock()
	var idle []*Op
	if l := b.last; l != nil {
		// At most two calls are outstanding: the last one and its
		// predecessor.
		for _, o := range []*Op{l.prev, l} {
			if o != nil && !o.started {
				o.started = true
				idle = append(idle, o)
			}
		}
	}
	b.mu.Unlock()
	for _, o := range idle {
		o.waitPrev()
		o.recv()
	}
}

// release frees the memory once nothing uses it.
func (b *Buffer) release() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	releasePeers(b.peers) // the peers' segment references
	var err error
	if b.base != 0 {
		err = b.eng.FreeManagedBuffer(b.base)
		b.base, b.mem = 0, nil
	}
	if b.owned {
		err = errors.Join(err, b.eng.Close())
	}
	return err
}

// newOp admits a call: it holds a gate token for the call's send phase
// (released by publish), takes the half the call uses and flips it, and
// records the call as the last one. While the half's previous call still
// has an async receive running it waits for it; with a hook pending there
// it refuses.
func (b *Buffer) newOp(l Layout, d *DispatchArgs, c *CombineArgs) (*Op, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.life.Enter() {
		return nil, ErrClosed
	}
	fail := func(err error) (*Op, error) {
		b.life.Exit()
		return nil, err
	}
	if b.peers == nil {
		return fail(errors.New("ep: buffer is not connected"))
	}
	if b.seen == nil {
		b.seen = map[Layout]bool{}
	}
	h := b.half
	if prev := b.ops[h]; prev != nil && !prev.recvDone {
		if !prev.async {
			return fail(errors.New("ep: two calls are already outstanding; call the recv hook of the earlier one first"))
		}
		b.mu.Unlock()
		<-prev.doneCh // an async receive ends by its own deadline, or by Close
		b.mu.Lock()
		if b.stop.Load() {
			return fail(ErrClosed)
		}
	}
	op := &Op{b: b, l: l, half: h, peers: b.peers, d: d, c: c, doneCh: make(chan struct{}), sentCh: make(chan struct{})}
	if prev := b.last; prev != nil && !prev.recvDone {
		op.prev = prev
	}
	b.last = op
	b.ops[h] = op
	b.seen[l] = true
	b.half ^= 1
	return op, nil
}

// publish runs f, op's whole send phase (data, then counts or flags), now,
// or, while the previous call's receive is still pending, when that receive
// ends. Why: call n writes into the peers' half that call n-2 used, so a
// peer must have finished receiving call n-2 first. This rank's receive of
// call n-1 completes only after every peer published call n-1's signals,
// which each peer does only after its own receive of call n-2 (by this same
// rule). So sending call n after this rank's receive of call n-1 is safe,
// and with two calls outstanding the second one's send waits for the
// first one's receive (its hook, or its async completion). A send that
// would start after Close began is skipped.
func (b *Buffer) publish(op *Op, f func()) {
	send := func() {
		defer b.life.Exit() // the token newOp took
		defer close(op.sentCh)
		if b.stop.Load() {
			return
		}
		b.sendMu.Lock()
		defer b.sendMu.Unlock()
		f()
	}
	b.mu.Lock()
	if p := op.prev; p != nil && !p.recvDone {
		p.after = send
		send = nil
	}
	b.mu.Unlock()
	if send != nil {
		send()
	}
}

// word returns the int32 at byte offset off of the local buffer.
func (b *Buffer) word(off int64) *int32 { return (*int32)(unsafe.Pointer(&b.mem[off])) }

// shmNap bounds every block of a wait on a word that a same-host sender
// wakes: the wake-up ends the block, so the bound only says how soon a
// waiter sees Close, and a waiter never wakes itself early (each early
// wake-up takes CPU from the sender it waits for on a busy host).
const shmNap = 20 * time.Millisecond

// waitSignal waits until *w holds a value of the wanted sign (negative:
// dispatch counts; positive: combine flags) or the deadline passes (never
// when deadline is zero), and returns it (0 on timeout, or once Close has
// begun). A value of the other sign is a late signal of another kind of
// call from a rank that was skipped then: it is cleared and the wait goes
// on. The wait follows the buffer's policy (channel.Policy); shm says the
// sender is a same-host peer whose writes wake it.
func (b *Buffer) waitSignal(w *int32, negative, shm bool, deadline time.Time) int32 {
	var v int32
	p := b.policy
	if shm {
		p.FirstNap, p.MaxNap = shmNap, shmNap
	}
	err := p.Await(channel.Wait{
		Word: (*uint32)(unsafe.Pointer(w)),
		Ready: func() bool {
			v = atomic.LoadInt32(w)
			if v == 0 {
				return false
			}
			if (v < 0) == negative {
				return true
			}
			atomic.CompareAndSwapInt32(w, v, 0) // stale, of the other kind
			return false
		},
		Deadline: deadline,
		Check: func() error {
			if b.stop.Load() {
				return ErrClosed
			}
			return nil
		},
	})
	if err != nil {
		return 0
	}
	return v
}

// deadlineAfter converts timeout_us (-1 or any negative: forever).
func deadlineAfter(timeoutUs int64) time.Time {
	if timeoutUs < 0 {
		return time.Time{}
	}
	return time.Now().Add(time.Duration(timeoutUs) * time.Microsecond)
}

// put delivers msgs (msgs[i] goes to rank to[i]) with channel.Put: each
// peer whose data arrived gets its signals. Failures are logged, never
// fatal to the call: the receiver's deadline decides what a lost message
// means.
func (b *Buffer) put(msgs []channel.Message, to []int) {
	for i, err := range channel.Put(b.eng, msgs, channel.EachMessage) {
		if err != nil {
			slog.Warn("ep: write to rank failed", "rank", to[i], "err", err)
		}
	}
}

// endpoint is p's EP buffer.
func (p *peer) endpoint() channel.Endpoint { return channel.Endpoint{Seg: p.seg, Base: p.Addr} }

// signal is the flag that stores v into the 4-byte signal at offset off of
// a peer's buffer, staged at offset src of the local one.
func (b *Buffer) signal(off, src int64, v int32) channel.Flag {
	return channel.Flag{Off: uint64(off), Val: uint64(uint32(v)), Src: b.mem[src : src+4 : src+4]}
}
