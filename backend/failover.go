package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// Surviving the coordinator's loss (the ranks' side; the coordinator's:
// coordinator_term.go). docs/collectives.md, "Coordinator failover", has
// the argument in full.
//
// A rank reaches the coordinator through a coordLink, which every group of
// the runtime uses as its client. The link probes the coordinator (Ping)
// every probeEvery and declares it lost when a probe gets no answer within
// lossAfter (a hung process: its port accepts, nothing answers), or when a
// call fails because its connection is gone (a dead one). Then it fails
// over: for terms t = T+1, T+2, ... it claims t in the rendezvous store
// (Add on claimKey(t): the rank that gets 1 is the only claimant of t,
// starts the coordinator of t — a process, or inside itself, as the first
// was started — and publishes its address under addrKey(t)); every other
// rank reads that address. It dials the coordinator of t, checks that it
// answers with term t, and resumes each of its groups there with the view
// it applied last. Calls that failed because the coordinator was lost are
// then sent again, to the new one: a sync in a reconciliation, a watch, a
// proposal, a join.
//
// At most one coordinator decides a given epoch: a coordinator of term t
// only exists after t was claimed, and each term has one claimant; every
// reply a rank acts on comes from the coordinator of the term it dialled
// (calls name their term, coordinators refuse other terms), and is
// accepted only if, after it arrived, the address of term t+1 was not yet
// in the store (superseded); a coordinator decides only on ranks' calls,
// and ranks call t+1 only once its address is published; so every
// decision of term t that any rank applies was taken before t+1 decided
// anything. The coordinator of t+1 starts from the newest view the ranks
// applied.

// Rendezvous store keys of a failover: the claim counter and the address
// of the coordinator of term t (t >= 1; term 0's address is CoordinatorKey).
func claimKey(t uint64) string { return "coordinator_claim/" + strconv.FormatUint(t, 10) }
func addrKey(t uint64) string  { return "coordinator_addr/" + strconv.FormatUint(t, 10) }

// How ranks watch the coordinator: a Ping every probeEvery; and how long
// a rank waits for a claimed term's address before trying the next term
// (its claimant died before publishing it).
const (
	probeEvery      = 200 * time.Millisecond
	supersededEvery = 5
	claimWait       = 10 * time.Second
)

// latestTerm is the coordinator a rank that starts now (a replacement, a
// late joiner) dials: that of the latest term published in store after
// term 0's at addr0.
func latestTerm(store Store, addr0 string) (addr string, term uint64) {
	addr = addr0
	for t := uint64(1); ; t++ {
		b, err := store.Get(addrKey(t), NoWait)
		if err != nil {
			return addr, term
		}
		addr, term = string(b), t
	}
}

// errSuperseded: a reply came from a coordinator whose term a later one
// has claimed; it is not acted on.
var errSuperseded = errors.New("the coordinator's term was superseded by a failover")

// coordinatorLossAfter is how long a probe waits for the coordinator's
// answer before the rank declares it lost: three quarters of the
// collective timeout (so a probe and its wait fit in it), at least 500 ms
// and at most 10 s.
func (rt *Runtime) coordinatorLossAfter() time.Duration {
	d := time.Duration(rt.collTimeout.Load()) * 3 / 4
	return min(max(d, 500*time.Millisecond), 10*time.Second)
}

// coordLink is a rank's connection to its job's coordinator, across
// failovers. It implements coordpb.CoordinatorClient.
type coordLink struct {
	rt     *Runtime
	place  CoordinatorPlace
	secret string

	mu     sync.Mutex // held across a failover
	term   uint64
	conn   *grpc.ClientConn
	client coordpb.CoordinatorClient
	closed bool

	// storeMu is read-held across every use of store, so that release
	// (the owner group closing; its store may be freed after) waits for
	// them.
	storeMu sync.RWMutex
	store   CounterStore // the owner group's store; nil: no failover possible
	owner   *Group

	stop chan struct{}
}

// newCoordLink connects to the coordinator of term at addr and, unless an
// operator runs it (place.Addr), starts probing it.
func newCoordLink(rt *Runtime, place CoordinatorPlace, addr, secret string, term uint64) (*coordLink, error) {
	conn, client, err := dialCoordinator(addr, secret, term)
	if err != nil {
		return nil, err
	}
	l := &coordLink{rt: rt, place: place, secret: secret, term: term, conn: conn, client: client, stop: make(chan struct{})}
	if place.Addr == "" {
		go l.probe()
	}
	return l, nil
}

// adopt makes g's store the one failovers go through, unless a group
// before it was adopted: the runtime's first group (torch's default group,
// which every rank of the job has, under the same keys everywhere).
func (l *coordLink) adopt(g *Group, s Store) {
	l.storeMu.Lock()
	defer l.storeMu.Unlock()
	if l.owner == nil {
		cs, _ := s.(CounterStore)
		l.owner, l.store = g, cs
	}
}

// lend makes s the store failovers go through while the runtime's first
// group is being created (a rank that starts while the coordinator is
// being replaced may meet the lost one), until unlend or adopt; the
// caller holds s for that long.
func (l *coordLink) lend(s Store) {
	l.storeMu.Lock()
	defer l.storeMu.Unlock()
	if l.owner == nil && l.store == nil {
		l.store, _ = s.(CounterStore)
	}
}

// unlend forgets a lent store that no group adopted (its creation failed).
func (l *coordLink) unlend() {
	l.storeMu.Lock()
	defer l.storeMu.Unlock()
	if l.owner == nil {
		l.store = nil
	}
}

// release forgets g's store when g is closing (its store may go with it):
// no failover is possible after that.
func (l *coordLink) release(g *Group) {
	l.storeMu.Lock()
	defer l.storeMu.Unlock()
	if l.owner == g {
		l.store = nil
	}
}

// errStore: the store failed a claim; trying later terms cannot help.
var errStore = errors.New("rendezvous store")

// errNoStore: the runtime has no store to fail over through.
var errNoStore = errors.New("no rendezvous store to fail over through (the runtime's first group is not created yet or destroyed, or its store has no atomic add)")

// withStore runs fn on the failover store, errNoStore if there is none.
func (l *coordLink) withStore(fn func(CounterStore) error) error {
	l.storeMu.RLock()
	defer l.storeMu.RUnlock()
	if l.store == nil {
		return errNoStore
	}
	return fn(l.store)
}

// current is the client and term to call now (it waits for a failover in
// progress).
func (l *coordLink) current() (coordpb.CoordinatorClient, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.client, l.term
}

// close ends probing and the connection.
func (l *coordLink) close() {
	close(l.stop)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.conn.Close()
}

// superseded reports whether the coordinator of a later term than term
// has published its address (a store that cannot answer counts as not:
// the reply stands). It looks without waiting (NoWait: no wait of the
// store times out, see Store.Get) and writes nothing.
func (l *coordLink) superseded(term uint64) bool {
	return l.withStore(func(s CounterStore) error {
		_, err := s.Get(addrKey(term+1), NoWait)
		return err
	}) == nil
}

// lostCoordinator reports whether err says the coordinator (not the call)
// failed: its connection is gone or was closed by the probe, or its term
// is over.
func lostCoordinator(err error) bool {
	if errors.Is(err, errSuperseded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled:
		return true
	}
	return false
}

// call runs fn on the current coordinator; when the coordinator was lost
// and retry is set, it fails over and runs fn again on the new one, until
// ctx ends. A reply from a superseded term is not returned.
func call[R any](l *coordLink, ctx context.Context, retry bool, fn func(coordpb.CoordinatorClient) (R, error)) (R, error) {
	for {
		c, term := l.current()
		resp, err := fn(c)
		if err == nil && l.superseded(term) {
			err = errSuperseded
		}
		if err == nil {
			return resp, nil
		}
		var zero R
		if !retry || ctx.Err() != nil || !lostCoordinator(err) {
			return zero, err
		}
		if ferr := l.failover(term, false); ferr != nil {
			return zero, fmt.Errorf("%w (coordinator failover: %v)", err, ferr)
		}
	}
}

// answers reports whether the coordinator behind c answers a Ping with
// term within the loss timeout. A Ping whose deadline passed half as late
// again as it was set for was not given its time — this process did not
// run meanwhile (stopped, or starved) — and is sent once more: a rank
// woken from SIGSTOP does not take its own sleep for the coordinator's
// loss.
func (l *coordLink) answers(c coordpb.CoordinatorClient, term uint64) bool {
	for try := 0; ; try++ {
		wait := l.rt.coordinatorLossAfter()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		resp, err := c.Ping(ctx, &coordpb.PingRequest{})
		cancel()
		if err == nil || try > 0 || status.Code(err) != codes.DeadlineExceeded || time.Since(start) < wait+wait/2 {
			return err == nil && resp.GetTerm() == term
		}
	}
}

// probe pings the coordinator every rt.coordProbe while the runtime has
// groups (never when that is 0), and fails over when it does not answer; every supersededEvery probes it also
// looks for a later term (another rank failed over while this one's
// coordinator still answers it: a partition, or a probe that timed out
// on a starved host).
func (l *coordLink) probe() {
	if l.rt.coordProbe == 0 {
		return
	}
	for n := 1; ; n++ {
		select {
		case <-l.stop:
			return
		case <-time.After(l.rt.coordProbe):
		}
		if l.rt.groupCount() == 0 {
			continue
		}
		c, term := l.current()
		if l.answers(c, term) && (n%supersededEvery != 0 || !l.superseded(term)) {
			continue
		}
		select {
		case <-l.stop:
			return
		default:
		}
		if err := l.failover(term, true); err != nil {
			slog.Warn("mooncake pg: coordinator failover failed", "term", term, "err", err)
		}
	}
}

// failover replaces the coordinator of term (lost: confirmed by a probe
// that got no answer, else checked here) by the coordinator of the next
// term that answers, claiming and starting it if no rank has (see the top
// of this file). It returns nil at once when another caller has failed
// over already, or when the coordinator answers after all.
func (l *coordLink) failover(term uint64, confirmed bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return ErrClosed
	case l.term != term:
		return nil
	case l.place.Addr != "":
		return fmt.Errorf("the coordinator at %s (MC_PG_COORDINATOR) is lost; one an operator runs is not replaced", l.place.Addr)
	}
	if err := l.withStore(func(CounterStore) error { return nil }); err != nil {
		return err
	}
	if !confirmed && l.answers(l.client, term) {
		time.Sleep(probeEvery) // a passing failure: call again, not at once
		return nil
	}
	start := time.Now()
	l.conn.Close()
	deadline := start.Add(initTimeout())
	var last error
	for t := term + 1; time.Now().Before(deadline) && !l.closed; t++ {
		addr, claimed, err := l.claimOrFind(t)
		if errors.Is(err, errStore) {
			return err
		}
		if err != nil {
			last = err
			continue
		}
		conn, client, err := dialCoordinator(addr, l.secret, t)
		if err != nil {
			last = err
			continue
		}
		if !l.answers(client, t) {
			conn.Close()
			last = fmt.Errorf("the coordinator of term %d at %s does not answer", t, addr)
			continue
		}
		if err := l.resumeAll(client); err != nil {
			conn.Close()
			last = err
			continue
		}
		l.term, l.conn, l.client = t, conn, client
		slog.Warn("mooncake pg: coordinator failover", "term", t, "addr", addr, "started_here", claimed,
			"took", time.Since(start).String())
		return nil
	}
	return fmt.Errorf("no coordinator after term %d answered within %v: %v", term, initTimeout(), last)
}

// claimOrFind claims term t or, if another rank did, reads the address of
// its coordinator (claimWait at most). claimed: this rank started it.
func (l *coordLink) claimOrFind(t uint64) (addr string, claimed bool, err error) {
	var n int64
	if err := l.withStore(func(s CounterStore) (err error) { n, err = s.Add(claimKey(t), 1); return err }); err != nil {
		return "", false, fmt.Errorf("%w: claim coordinator term %d: %w", errStore, t, err)
	}
	if n != 1 {
		var b []byte
		err := l.withStore(func(s CounterStore) (err error) { b, err = s.Get(addrKey(t), claimWait); return err })
		if err != nil {
			return "", false, fmt.Errorf("read the address of coordinator term %d: %w", t, err)
		}
		return string(b), false, nil
	}
	l.rt.mu.Lock()
	addr, err = l.rt.startCoordinator(l.place, l.secret, t)
	l.rt.mu.Unlock()
	if err != nil {
		return "", false, fmt.Errorf("start coordinator term %d: %w", t, err)
	}
	if err := l.withStore(func(s CounterStore) error { return s.Set(addrKey(t), []byte(addr)) }); err != nil {
		return "", false, fmt.Errorf("publish coordinator term %d: %w", t, err)
	}
	return addr, true, nil
}

// resumeAll brings each of the runtime's groups with membership to the
// coordinator behind c and applies the view it answers with (newer, when
// another rank resumed from a view this one had not applied yet).
func (l *coordLink) resumeAll(c coordpb.CoordinatorClient) error {
	for _, g := range l.rt.groupList() {
		if !g.members {
			continue
		}
		v := g.view.Load()
		ctx, cancel := context.WithTimeout(context.Background(), l.rt.coordinatorLossAfter())
		resp, err := c.Resume(ctx, &coordpb.ResumeRequest{GroupId: g.id, Rank: int32(g.rank), Gen: g.gen(), View: viewToPB(*v),
			Layout: g.lay.key(), Manual: g.manual, WindowUs: time.Duration(l.rt.faultWindow.Load()).Microseconds()})
		cancel()
		if err != nil {
			return fmt.Errorf("resume group %q: %w", g.id, err)
		}
		g.applyView(viewFromPB(resp.GetView()))
	}
	return nil
}

// Join implements coordpb.CoordinatorClient.
func (l *coordLink) Join(ctx context.Context, in *coordpb.JoinRequest, opts ...grpc.CallOption) (*coordpb.JoinResponse, error) {
	return call(l, ctx, true, func(c coordpb.CoordinatorClient) (*coordpb.JoinResponse, error) { return c.Join(ctx, in, opts...) })
}

// Ready implements coordpb.CoordinatorClient. A founding's readiness round
// does not survive a failover: Ready is not sent again.
func (l *coordLink) Ready(ctx context.Context, in *coordpb.ReadyRequest, opts ...grpc.CallOption) (*coordpb.ReadyResponse, error) {
	return call(l, ctx, false, func(c coordpb.CoordinatorClient) (*coordpb.ReadyResponse, error) { return c.Ready(ctx, in, opts...) })
}

// Sync implements coordpb.CoordinatorClient.
func (l *coordLink) Sync(ctx context.Context, in *coordpb.SyncRequest, opts ...grpc.CallOption) (*coordpb.SyncResponse, error) {
	return call(l, ctx, true, func(c coordpb.CoordinatorClient) (*coordpb.SyncResponse, error) { return c.Sync(ctx, in, opts...) })
}

// Watch implements coordpb.CoordinatorClient.
func (l *coordLink) Watch(ctx context.Context, in *coordpb.WatchRequest, opts ...grpc.CallOption) (*coordpb.WatchResponse, error) {
	return call(l, ctx, true, func(c coordpb.CoordinatorClient) (*coordpb.WatchResponse, error) { return c.Watch(ctx, in, opts...) })
}

// Confirm implements coordpb.CoordinatorClient.
func (l *coordLink) Confirm(ctx context.Context, in *coordpb.ConfirmRequest, opts ...grpc.CallOption) (*coordpb.ConfirmResponse, error) {
	return call(l, ctx, true, func(c coordpb.CoordinatorClient) (*coordpb.ConfirmResponse, error) {
		return c.Confirm(ctx, in, opts...)
	})
}

// Propose implements coordpb.CoordinatorClient.
func (l *coordLink) Propose(ctx context.Context, in *coordpb.ProposeRequest, opts ...grpc.CallOption) (*coordpb.ProposeResponse, error) {
	return call(l, ctx, true, func(c coordpb.CoordinatorClient) (*coordpb.ProposeResponse, error) {
		return c.Propose(ctx, in, opts...)
	})
}

// Leave implements coordpb.CoordinatorClient.
func (l *coordLink) Leave(ctx context.Context, in *coordpb.LeaveRequest, opts ...grpc.CallOption) (*coordpb.LeaveResponse, error) {
	return call(l, ctx, false, func(c coordpb.CoordinatorClient) (*coordpb.LeaveResponse, error) { return c.Leave(ctx, in, opts...) })
}

// Resume implements coordpb.CoordinatorClient (failovers resume through
// the new coordinator's own client; this sends to the current one).
func (l *coordLink) Resume(ctx context.Context, in *coordpb.ResumeRequest, opts ...grpc.CallOption) (*coordpb.ResumeResponse, error) {
	return call(l, ctx, false, func(c coordpb.CoordinatorClient) (*coordpb.ResumeResponse, error) { return c.Resume(ctx, in, opts...) })
}

// Ping implements coordpb.CoordinatorClient.
func (l *coordLink) Ping(ctx context.Context, in *coordpb.PingRequest, opts ...grpc.CallOption) (*coordpb.PingResponse, error) {
	return call(l, ctx, false, func(c coordpb.CoordinatorClient) (*coordpb.PingResponse, error) { return c.Ping(ctx, in, opts...) })
}
