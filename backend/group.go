package backend

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/backend/coordpb"
	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/transfer"
	"github.com/mooncake-go/mooncake/transfer/channel"
)

// GroupConfig says which group to join. Size 1 is allowed.
type GroupConfig struct {
	Rank, Size int
	// GroupID names the group (torch's group name); ranks of one group must
	// use the same ID, and a destroyed group's ID may be used again.
	GroupID string
	// Store bootstraps the runtime's coordinator on its first group.
	Store Store
	// CollSlot and P2PSlot override the slot sizes (bytes) when > 0.
	CollSlot, P2PSlot int
	// Manual turns auto_deactivate_on_failure off: a failed peer is left
	// out of the op it failed in, but stays in the active mask.
	Manual bool
	// MaxSize is the group's number of slots (<= 0: Size; at most
	// MaxGroupSlots): founders hold slots 0..Size-1, the rest are for
	// ranks that join later.
	MaxSize int
	// Extension joins an existing group (upstream's is_extension): in an
	// empty slot, or replacing a member that died, was excluded or left. The rank
	// starts inactive and isolated until JoinGroup.
	Extension bool
}

// peer is how this rank reaches one slot's rank: its segment (the group's
// own reference to it, and its handle) and buffer, and which incarnation of
// the slot published them.
type peer struct {
	name string
	ref  *transfer.Segment
	seg  transfer.SegmentHandle
	base uint64
	gen  uint64
}

// Group is one process group as seen by one rank.
type Group struct {
	rt     *Runtime
	engine *transfer.Engine
	rank   int
	size   int // slots
	// declared is the size this rank was created with (torch's group size).
	declared int
	id       string
	lay      layout
	base     uintptr
	mem      []byte
	// peers, per slot: nil while the slot has no endpoint (and for this
	// rank). Replaced when the slot's incarnation changes (elastic.go).
	peers []atomic.Pointer[peer]

	// Sequence numbers per [channel][peer]: messages sent to the peer and
	// messages from it consumed. Each element has exactly one owner: the
	// collective FIFO for chColl, the peer's send or receive queue for chP2P.
	sent [numChannels][]uint64
	rcvd [numChannels][]uint64
	// flags[kind][ch][peer] is the flag (kind fReady or fAck) of the last
	// such message to the peer, which a put's message refers to: kept here
	// so that a put allocates nothing. The same owners as sent (fReady)
	// and rcvd (fAck).
	flags [fAck + 1][numChannels][][1]channel.Flag
	// acks are the collective channel's acknowledgements still in flight
	// over transfers (nil: none); owned by the collective FIFO (link.go).
	acks *channel.Posted
	// aliveFn is g.alive, made once: a put's Patience that outlives it
	// (channel.Post) would allocate the method value on every put.
	aliveFn func(transfer.SegmentHandle) error
	// collOps counts collectives run so far (the same on every rank);
	// pullLent[s][p] is the sequence number of the last message that let
	// peer p read this rank's pull slot s. Both owned by the collective FIFO.
	collOps  uint64
	pullLent [nSlots][]uint64
	// cma is whether the active ranks read each other with CMA (cma.go);
	// owned by the collective FIFO.
	cma cmaState
	// seqBase[ch] is where the channel's sequence numbers started: the
	// collective channel restarts at epoch<<32 on every membership epoch
	// (faults.go), so words written in an older epoch never satisfy a wait.
	seqBase [numChannels]uint64

	// Membership (faults.go). view is the last view applied; the rest is
	// owned by the collective FIFO: the epoch its sequence numbers follow,
	// the active ranks it runs ops over (ascending) and this rank's
	// position among them, and whether the running op has written into
	// the caller's buffers.
	client coordpb.CoordinatorClient
	manual bool
	// members: the coordinator keeps this group's membership (at most
	// MaxGroupSlots slots); a coordinator failover resumes it.
	members bool
	view    atomic.Pointer[View]
	// viewSignal is closed and replaced whenever a view is stored, so a
	// caller waiting for a membership change (JoinGroup) blocks on it
	// instead of polling the view (viewChanged).
	viewSignal atomic.Pointer[chan struct{}]
	abortAt    atomic.Pointer[pendingWindow] // the last pending window the watch saw
	collBase   uint64
	// collAt is the base of the collective running on the FIFO, plus one
	// (0: none runs); the watch reads it (faults.go, leaveOlderBase).
	collAt  atomic.Uint64
	collIso bool   // the collective FIFO runs over this rank alone (isolated)
	exclOps uint64 // manual mode: act leaves out excluded ranks through this op of the base
	// carry is the outcome of a reconciliation this rank took part in
	// from its idle queue: its next collective is the failed op, and
	// completes with that outcome, as on the ranks that met the failure.
	carry     outcome
	act       []int
	oth       []int // act without this rank (others), set with act
	pos       int
	dirty     bool
	watchCtx  context.Context
	stopWatch context.CancelFunc
	syncMu    sync.Mutex
	// Elastic membership (elastic.go): isolated until an extension is
	// first activated; quiescing while join_group runs; reconciled when a
	// failure was reconciled since the last SyncAfterFailure.
	isolated   atomic.Bool
	quiescing  atomic.Bool
	reconciled atomic.Bool
	mirror     []int32 // the caller's active_ranks memory (SetMirror); syncMu

	coll  *fifo
	sendQ []*fifo
	recvQ []*fifo
	// policy is how this rank waits for its peers' words (wait.go).
	policy channel.Policy
	// spinOnce: the host is oversubscribed, so a collective spins in its
	// first wait only (wait.go); collSpun: the running one has. Owned by
	// the collective FIFO.
	spinOnce, collSpun bool
	// life gates ops against Close (lifecycle.go); closed is set when
	// closing begins, and makes every wait give up with ErrClosed.
	life    *lifecycle
	closed  atomic.Bool
	broken  atomic.Pointer[error]
	closeMu sync.Mutex
}

// NewGroup joins a group: it allocates this rank's buffer, registers it
// with the coordinator (founding the group with the other founders, or, for
// an extension, attaching to it) and opens the segments of the members.
func (rt *Runtime) NewGroup(cfg GroupConfig) (*Group, error) {
	if cfg.Size <= 0 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: rank %d of group size %d", ErrInvalid, cfg.Rank, cfg.Size)
	}
	slots := cfg.MaxSize
	if slots <= 0 {
		slots = cfg.Size
	}
	if slots < cfg.Size || slots > MaxGroupSlots && slots != cfg.Size {
		return nil, fmt.Errorf("%w: group of %d ranks in %d slots (at most %d)", ErrInvalid, cfg.Size, slots, MaxGroupSlots)
	}
	if cfg.Extension && slots > MaxGroupSlots {
		return nil, fmt.Errorf("%w: an extension needs a group of at most %d slots", ErrInvalid, MaxGroupSlots)
	}
	if cfg.GroupID == "" {
		return nil, fmt.Errorf("%w: empty group id", ErrInvalid)
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: no store", ErrInvalid)
	}
	e, err := rt.Engine()
	if err != nil {
		return nil, rt.failFounding(cfg, slots, err)
	}
	client, err := rt.coordinator(cfg.Store, cfg.Rank, cfg.Rank == 0 && !cfg.Extension)
	if err != nil {
		return nil, err
	}
	if l, ok := client.(*coordLink); ok {
		l.lend(cfg.Store)
		defer l.unlend()
	}
	g := &Group{rt: rt, engine: e, rank: cfg.Rank, size: slots, declared: cfg.Size, id: cfg.GroupID,
		lay: groupLayout(cfg, slots), client: client, manual: cfg.Manual, life: newLifecycle()}
	g.aliveFn = g.alive
	if g.base, err = e.AllocateManagedBuffer(uint64(g.lay.total)); err != nil {
		return nil, fmt.Errorf("allocate group buffer (%d bytes): %w", g.lay.total, err)
	}
	g.mem = gpu.HostBytes(g.base, uint64(g.lay.total))
	resp, err := rt.join(client, &coordpb.JoinRequest{
		GroupId:   cfg.GroupID,
		Rank:      int32(cfg.Rank),
		Size:      int32(cfg.Size),
		MaxSize:   int32(slots),
		Extension: cfg.Extension,
		Endpoint:  &coordpb.Endpoint{Segment: e.Name(), Buffer: uint64(g.base), BufferLen: uint64(g.lay.total)},
		Layout:    g.lay.key(),
		Manual:    cfg.Manual,
	})
	if err != nil {
		e.FreeManagedBuffer(g.base)
		return nil, err
	}
	v := firstView(resp, slots)
	g.members = resp.GetView() != nil
	g.peers = make([]atomic.Pointer[peer], slots)
	err = g.openPeers(v)
	if !cfg.Extension { // a founder: the group exists once every founder set it up
		err = rt.awaitFounders(client, cfg.GroupID, cfg.Rank, err, g.silentFounder)
	}
	if err != nil {
		g.closePeers()
		e.FreeManagedBuffer(g.base)
		return nil, err
	}
	for ch := range numChannels {
		g.sent[ch] = make([]uint64, slots)
		g.rcvd[ch] = make([]uint64, slots)
		for kind := range g.flags {
			g.flags[kind][ch] = make([][1]channel.Flag, slots)
		}
	}
	for s := range nSlots {
		g.pullLent[s] = make([]uint64, slots)
	}
	g.policy = channel.DefaultPolicy(slots)
	g.spinOnce = slots > runtime.NumCPU()
	if us := envvars.PGSpinUs.Int(-1); us > 0 {
		g.policy.Spin = time.Duration(us) * time.Microsecond
	}
	if us := envvars.PGYieldUs.Int(-1); us >= 0 {
		g.policy.YieldFor = time.Duration(us) * time.Microsecond
	}
	g.coll = newFifo(g.policy.Spin)
	g.sendQ = make([]*fifo, slots)
	g.recvQ = make([]*fifo, slots)
	for i := range slots {
		if i != cfg.Rank {
			g.sendQ[i], g.recvQ[i] = newFifo(0), newFifo(0)
		}
	}
	g.isolated.Store(cfg.Extension)
	g.startMembership(v)
	rt.liveGroups.Add(1)
	rt.addGroup(g)
	if l, ok := client.(*coordLink); ok {
		l.adopt(g, cfg.Store)
	}
	return g, nil
}

// groupLayout is the layout of the buffer of a group of slots slots.
func groupLayout(cfg GroupConfig, slots int) layout {
	coll, p2p := slotSizes(slots)
	if cfg.CollSlot > 0 {
		coll = alignUp(cfg.CollSlot, slotGranularity)
	}
	if cfg.P2PSlot > 0 {
		p2p = alignUp(cfg.P2PSlot, slotGranularity)
	}
	return newLayout(slots, coll, p2p)
}

// firstView is the view a group starts from: the coordinator's, or for a
// group without membership (more than MaxGroupSlots ranks) every founder
// active.
func firstView(resp *coordpb.JoinResponse, slots int) View {
	if resp.GetView() != nil {
		return viewFromPB(resp.GetView())
	}
	v := View{Active: make([]bool, slots), State: make([]MemberState, slots), Healthy: make([]bool, slots),
		Endpoints: make([]Endpoint, slots)}
	for i, ep := range resp.GetEndpoints() {
		v.Active[i], v.State[i], v.Healthy[i], v.Endpoints[i] = true, MemberActive, true, endpointFromPB(ep)
	}
	return v
}

// Rank is this rank's index in the group.
func (g *Group) Rank() int { return g.rank }

// Size is the group's number of slots (in-group ranks it can hold).
func (g *Group) Size() int { return g.size }

// ID is the group's name.
func (g *Group) ID() string { return g.id }

// SlotBytes is the collective slot size: the largest piece one message
// carries; bigger tensors are chunked.
func (g *Group) SlotBytes() int { return g.lay.slot[chColl] }

// Close destroys the group: open → closing → closed. Closing refuses new
// ops (ErrClosed), makes every running wait give up, lets queued ops
// complete with ErrClosed, and waits until every op submitted before it —
// queued, running on a queue, or running inline on a caller's goroutine —
// has completed (its Work's callbacks included). Only then are the peers'
// segment references released and the buffer unmapped. An op that was
// past its last wait completes normally; every other one gets ErrClosed.
// Close returns once the group is closed, also when called again or
// concurrently; it must not be called from an op's completion callback
// (it would wait for that op).
func (g *Group) Close() {
	g.closeMu.Lock()
	defer g.closeMu.Unlock()
	if g.closed.Load() {
		return
	}
	drained := g.life.close()
	g.closed.Store(true)
	g.rt.dropGroup(g)
	if l, ok := g.client.(*coordLink); ok {
		l.release(g) // its store may go once Close returns
	}
	g.SetMirror(nil, 0)
	g.leave()
	g.stopWatch()
	var dones []<-chan struct{}
	dones = append(dones, g.coll.close())
	for i := range g.size {
		if g.sendQ[i] != nil {
			dones = append(dones, g.sendQ[i].close(), g.recvQ[i].close())
		}
	}
	for _, d := range dones {
		<-d
	}
	<-drained
	g.dropAcks()    // the collective FIFO has stopped
	g.syncMu.Lock() // no view is being followed (followEndpoints)
	g.closePeers()
	g.syncMu.Unlock()
	g.engine.FreeManagedBuffer(g.base)
	g.rt.liveGroups.Add(-1)
}

// fail records a communication failure that reconciliation could not
// handle: the group is unusable afterwards.
func (g *Group) fail(err error) error {
	if err == nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrInactive) || errors.Is(err, ErrClosed) {
		return err
	}
	broken := err // its own variable: taking err's address would move err to the heap on every call
	g.broken.CompareAndSwap(nil, &broken)
	return err
}

// usable returns why no op can start, or nil.
func (g *Group) usable() error {
	if g.closed.Load() {
		return ErrClosed
	}
	if p := g.broken.Load(); p != nil {
		return fmt.Errorf("%w: %v", ErrBroken, *p)
	}
	return nil
}

// run queues fn on q (or, with inline, runs it now when q is idle) and
// returns its Work. The op holds the group's lifecycle gate (entered by
// start) until its Work has completed.
func (g *Group) run(q *fifo, fn func() error, inline bool) *Work {
	w := newWork()
	// Two closures, so that the inline one, which tryInline does not
	// keep, costs no allocation.
	if inline && q.tryInline(func() { g.runOp(q, fn, w) }) {
		return w
	}
	if !q.submit(func() { g.runOp(q, fn, w) }) {
		w.complete(ErrClosed)
		g.life.exit()
	}
	return w
}

// runOp runs fn, an op of queue q, and completes w with its outcome.
func (g *Group) runOp(q *fifo, fn func() error, w *Work) {
	defer g.life.exit()
	if err := g.usable(); err != nil {
		w.complete(err)
		return
	}
	if q == g.coll {
		g.catchUp()
		g.collAt.Store(g.collBase + 1)
		defer g.collAt.Store(0)
		if !g.collIso && !g.isActive() {
			w.complete(fmt.Errorf("%w: rank %d", ErrInactive, g.rank))
			return
		}
		g.collOps++
		g.collSpun = false
		g.dirty = false
		if g.carry.apply(g.collBase, g.collOps, w) {
			// The others completed this collective without running it
			// again after a failure this rank reconciled before it:
			// it ends here as failed, and its next collective is
			// their next, the first of the base.
			g.collOps--
			w.complete(nil)
			return
		}
	}
	var err error
	if q == g.coll && !g.collIso && g.aborting() {
		err = errAborted // a window is pending for this collective: sync before it runs
	} else {
		if q == g.coll {
			w.setRan(g.act)
		}
		err = fn()
	}
	if err == nil && q == g.coll && !g.collIso && g.fenced() {
		// The survivors excluded this rank while it was stopped and went
		// on without it: it must not report success for an op they failed
		// it in (fence.go).
		err = errLeftOut
	}
	switch {
	case err == nil || errors.Is(err, ErrClosed):
	case g.closed.Load(): // the close cut it short (peers may be closing too)
		err = fmt.Errorf("%w during the op (%v)", ErrClosed, err)
	case recoverable(err):
		err = g.recover(q == g.coll, fn, w, err)
		if err != nil && !errors.Is(err, ErrClosed) && g.closed.Load() {
			// The close began during the reconciliation and cut it short.
			err = fmt.Errorf("%w during the op (%v)", ErrClosed, err)
		}
	}
	w.complete(g.fail(err))
}

func (g *Group) collTimeout() time.Duration { return time.Duration(g.rt.collTimeout.Load()) }
func (g *Group) p2pTimeout() time.Duration  { return time.Duration(g.rt.p2pTimeout.Load()) }
func (g *Group) hangTimeout() time.Duration { return time.Duration(g.rt.hangTimeout.Load()) }

// othersInRingOrder lists the other active ranks in ring order from this
// one: the next active rank first, wrapping around. Ranks that walk their
// lists in step then address different peers at each step, instead of
// all starting at the lowest rank.
func (g *Group) othersInRingOrder() []int {
	n := len(g.act)
	o := make([]int, 0, max(n-1, 0))
	for i := 1; i < n; i++ {
		o = append(o, g.act[(g.pos+i)%n])
	}
	return o
}
