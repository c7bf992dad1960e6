package backend

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/transfer"
)

// CoordinatorKey is the Store key under which rank 0 publishes the
// coordinator's address (upstream's key).
const CoordinatorKey = "coordinator_addr"

// Defaults, as upstream (spec/pg.md §7).
const (
	DefaultCollectiveTimeout = 10 * time.Second
	DefaultP2PTimeout        = 10 * time.Second
	// DefaultFaultWindow is the reconciliation window (upstream's 30 s). A
	// window closes earlier once every active rank has synced or was
	// reported failed; the full time only passes when a rank stays silent.
	DefaultFaultWindow = 30 * time.Second
	defaultInitTimeout = 300 * time.Second
)

// Runtime is the per-process state of the backend: the Transfer Engine all
// groups share, the connection to the coordinator, and on the rank that
// started it the coordinator itself. It lives as long as the process (as
// upstream's context), so destroy_process_group followed by a re-init reuses
// it. Tests create one Runtime per in-process rank.
type Runtime struct {
	mu        sync.Mutex
	hostIP    string // "" until set or chosen (publishedHost)
	filter    []string
	engine    *transfer.Engine
	ownEngine bool
	coord     *coordinatorServer
	coordBin  string // the coordinator command, "" if none (SetCoordinatorBinary)
	link      *coordLink
	// coordProbe is how often the rank pings its coordinator
	// (probeEvery; failover.go); 0 turns the probe off (tests that count
	// the allocations of an op).
	coordProbe time.Duration

	groupsMu sync.Mutex
	groups   map[*Group]struct{} // made by NewGroup and not closed (a failover resumes them)

	liveGroups  atomic.Int64 // groups made by NewGroup and not closed
	collTimeout atomic.Int64 // ns
	p2pTimeout  atomic.Int64 // ns
	faultWindow atomic.Int64 // ns
	hangTimeout atomic.Int64 // ns; 0: off
}

// NewRuntime returns a Runtime with upstream's defaults; its host address
// is chosen when the engine starts (publishedHost) unless SetHostIP sets it.
func NewRuntime() *Runtime {
	rt := &Runtime{coordProbe: probeEvery}
	rt.collTimeout.Store(int64(DefaultCollectiveTimeout))
	rt.hangTimeout.Store(int64(time.Duration(envvars.PGHangTimeoutMs.Int(0)) * time.Millisecond))
	rt.p2pTimeout.Store(int64(DefaultP2PTimeout))
	rt.faultWindow.Store(int64(DefaultFaultWindow))
	return rt
}

// SetHostIP sets the IP the engine and the coordinator listen on, and that
// the rank publishes to its peers (overriding MC_PG_HOST_IP and the
// address chosen from MASTER_ADDR). It is refused once the engine runs.
func (rt *Runtime) SetHostIP(ip string) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.engine != nil {
		return fmt.Errorf("%w: host IP is immutable once the backend is initialised", ErrInvalid)
	}
	if ip == "" {
		return fmt.Errorf("%w: empty host IP", ErrInvalid)
	}
	rt.hostIP = ip
	return nil
}

// HostIP returns the host IP: the one set, or once the engine runs the one
// chosen; "" while it is still to be chosen.
func (rt *Runtime) HostIP() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.hostIP
}

// SetDeviceFilter records the NIC whitelist (sorted, deduplicated). The TCP
// and shm transports have no NIC choice, so it only takes effect with an
// RDMA transport; it is refused once the engine runs.
func (rt *Runtime) SetDeviceFilter(names []string) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.engine != nil {
		return fmt.Errorf("%w: device filter must be set before the backend is initialised", ErrInvalid)
	}
	f := slices.Clone(names)
	slices.Sort(f)
	rt.filter = slices.Compact(f)
	return nil
}

// DeviceFilter returns the recorded NIC whitelist.
func (rt *Runtime) DeviceFilter() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.filter)
}

// SetEngine makes the runtime use an external, started engine (nil: go
// back to creating its own); the host IP becomes the engine's. Refused once
// the runtime has an engine, and going back (nil) is refused while process
// groups still use the external one: the caller may release it after.
func (rt *Runtime) SetEngine(e *transfer.Engine) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.engine != nil && (rt.ownEngine || e != nil) {
		return fmt.Errorf("%w: the backend already uses a transfer engine", ErrInvalid)
	}
	if e == nil && rt.engine != nil && rt.liveGroups.Load() > 0 {
		return fmt.Errorf("%w: %d process groups still use the transfer engine; destroy them first", ErrInvalid, rt.liveGroups.Load())
	}
	rt.engine, rt.ownEngine = e, false
	if e != nil {
		if host, _, err := net.SplitHostPort(e.Name()); err == nil {
			rt.hostIP = host
		}
	}
	return nil
}

// SetCollectiveTimeout sets after how long a collective waiting on a peer
// probes whether the peer is alive (it keeps waiting while it is).
func (rt *Runtime) SetCollectiveTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: collective timeout must be positive", ErrInvalid)
	}
	rt.collTimeout.Store(int64(d))
	return nil
}

// SetHangTimeout sets after how long a collective that waits for a rank
// that still answers probes, but has not entered the collective, fails
// that rank (membership.go, "A hung rank"); 0 turns it off (the default,
// or MC_PG_HANG_TIMEOUT_MS): a live rank is then waited for without end.
// Choose it well above the longest time a live rank may take to reach a
// collective its peers are in: a rank later than that is failed.
func (rt *Runtime) SetHangTimeout(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: hang timeout must be >= 0", ErrInvalid)
	}
	rt.hangTimeout.Store(int64(d))
	return nil
}

// SetFaultReconciliationWindow sets how long a failure reconciliation
// waits at most for every active rank of the group to take part.
func (rt *Runtime) SetFaultReconciliationWindow(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: reconciliation window must be positive", ErrInvalid)
	}
	rt.faultWindow.Store(int64(d))
	return nil
}

// SetP2PTimeout is SetCollectiveTimeout for send/recv.
func (rt *Runtime) SetP2PTimeout(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: p2p timeout must be >= 0", ErrInvalid)
	}
	if d == 0 {
		d = DefaultP2PTimeout
	}
	rt.p2pTimeout.Store(int64(d))
	return nil
}

// Engine returns the runtime's engine, starting one on first use.
func (rt *Runtime) Engine() (*transfer.Engine, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.engine != nil {
		return rt.engine, nil
	}
	host, err := publishedHost(rt.hostIP)
	if err != nil {
		return nil, err
	}
	e, err := transfer.New(transfer.Config{LocalHostname: host, MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		return nil, fmt.Errorf("start transfer engine: %w", err)
	}
	rt.hostIP = host
	rt.engine, rt.ownEngine = e, true
	return e, nil
}

// SetCoordinatorBinary names the mooncake_pg_coordinator command the
// founding rank 0 starts the coordinator with (MC_PG_COORDINATOR's
// default, "process"); "" keeps the coordinator inside rank 0. It takes
// effect for the first group the runtime joins.
func (rt *Runtime) SetCoordinatorBinary(path string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.coordBin = path
}

// coordinator returns the coordinator client of this runtime's rank in
// the group being created, bootstrapping on first use:
// with MC_PG_COORDINATOR an address, every rank dials it; otherwise the
// founding rank 0 (serve) starts the coordinator (its own process or
// inside this one, coordinator_process.go) and publishes its address in
// store, where every other rank reads it.
func (rt *Runtime) coordinator(store Store, rank int, serve bool) (coordpb.CoordinatorClient, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.link != nil {
		return rt.link, nil
	}
	place, err := coordinatorPlacement(rt.coordBin)
	if err != nil {
		return nil, err
	}
	addr, secret := place.Addr, ""
	if addr != "" {
		secret = operatorSecret()
	}
	if addr == "" && serve {
		if secret, err = newSecret(); err != nil {
			return nil, err
		}
		if addr, err = rt.startCoordinator(place, secret, 0); err != nil {
			return nil, err
		}
		// The secret goes first: a rank that finds the address finds it.
		if err := store.Set(SecretKey, []byte(secret)); err != nil {
			rt.stopCoordinator()
			return nil, fmt.Errorf("publish coordinator secret: %w", err)
		}
		if err := store.Set(CoordinatorKey, []byte(addr)); err != nil {
			rt.stopCoordinator()
			return nil, fmt.Errorf("publish coordinator address: %w", err)
		}
	}
	term := uint64(0)
	if addr == "" {
		b, err := store.Get(CoordinatorKey, initTimeout())
		if err != nil {
			return nil, fmt.Errorf("read coordinator address: %w", err)
		}
		if failure, ok := strings.CutPrefix(string(b), failedMark); ok {
			store.Set(seenKey(rank), nil) // rank 0 may go (founding.go)
			return nil, fmt.Errorf("%w: %s", ErrPeer, failure)
		}
		addr = string(b)
		if b, err = store.Get(SecretKey, initTimeout()); err != nil {
			return nil, fmt.Errorf("read coordinator secret: %w", err)
		}
		secret = string(b)
		addr, term = latestTerm(store, addr)
	}
	l, err := newCoordLink(rt, place, addr, secret, term)
	if err != nil {
		return nil, err
	}
	rt.link = l
	return l, nil
}

// startCoordinator starts the coordinator of term where place says,
// admitting calls that carry secret, and returns its address (rt.mu
// held). One this runtime served itself before is stopped first: a
// failover started a later term.
func (rt *Runtime) startCoordinator(place CoordinatorPlace, secret string, term uint64) (string, error) {
	if place.Process {
		return spawnCoordinator(rt.coordBin, rt.hostIP, initTimeout(), secret, term)
	}
	rt.stopCoordinator()
	c, err := startCoordinator(rt.hostIP, secret, term)
	if err != nil {
		return "", err
	}
	rt.coord = c
	return c.addr(), nil
}

func (rt *Runtime) stopCoordinator() {
	if rt.coord != nil {
		rt.coord.stop()
		rt.coord = nil
	}
}

// join registers this rank's endpoint for a group: founders wait for each
// other and get everyone's endpoints; an extension attaches to the formed
// group, retrying for up to extensionWait while its slot is still held by a
// live member (a replacement started before the failure was reconciled)
// or the group is still being founded.
func (rt *Runtime) join(client coordpb.CoordinatorClient, r *coordpb.JoinRequest) (*coordpb.JoinResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), initTimeout())
	defer cancel()
	giveUp := time.Now().Add(extensionWait)
	for {
		resp, err := client.Join(ctx, r)
		if err == nil {
			if !r.Extension && len(resp.Endpoints) != int(r.Size) {
				return nil, fmt.Errorf("join group %q: coordinator returned %d endpoints for %d ranks", r.GroupId, len(resp.Endpoints), r.Size)
			}
			if r.Extension && len(resp.GetView().GetEndpoints()) != int(r.MaxSize) {
				return nil, fmt.Errorf("join group %q: coordinator returned a view of %d slots for %d", r.GroupId, len(resp.GetView().GetEndpoints()), r.MaxSize)
			}
			return resp, nil
		}
		if !r.Extension && status.Code(err) == codes.DeadlineExceeded {
			// A founder whose round never completed: the others did not
			// come, or the group had formed before this process started
			// and its slot was free (a held one is refused at once:
			// coordinatorServer.slotTaken).
			return nil, fmt.Errorf("join group %q as rank %d of %d: the other founders did not join within %v "+
				"(MC_PG_INIT_TIMEOUT); a process joining a group that has already formed must pass is_extension=True: %w",
				r.GroupId, r.Rank, r.Size, initTimeout(), err)
		}
		if !r.Extension || status.Code(err) != codes.FailedPrecondition || time.Now().After(giveUp) {
			return nil, fmt.Errorf("join group %q as rank %d of %d: %w", r.GroupId, r.Rank, r.Size, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("join group %q as rank %d of %d: %w", r.GroupId, r.Rank, r.Size, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ready reports a founder's set-up outcome (setup nil: success) to the
// coordinator and returns nil once every founder of the group succeeded,
// else the error every founder gets: group creation is all or nothing
// (coordinator_ready.go).
func (rt *Runtime) ready(client coordpb.CoordinatorClient, groupID string, rank int, setup error) error {
	return rt.readyCtx(context.Background(), client, groupID, rank, setup)
}

// readyCtx is ready, given up when ctx ends (the report is withdrawn).
func (rt *Runtime) readyCtx(parent context.Context, client coordpb.CoordinatorClient, groupID string, rank int, setup error) error {
	ctx, cancel := context.WithTimeout(parent, initTimeout())
	defer cancel()
	r := &coordpb.ReadyRequest{GroupId: groupID, Rank: int32(rank)}
	if setup != nil {
		r.Error = setup.Error()
	}
	resp, err := client.Ready(ctx, r)
	switch {
	case err != nil && parent.Err() != nil:
		return errWithdrawn
	case err != nil && setup != nil:
		return fmt.Errorf("%w: group %q was not created: %w (telling the other founders failed: %v)", ErrPeer, groupID, setup, err)
	case err != nil:
		return fmt.Errorf("%w: group %q was not created: waiting for every founder to set it up: %w", ErrPeer, groupID, err)
	case resp.GetError() != "":
		return fmt.Errorf("%w: %s", ErrPeer, resp.GetError())
	case setup != nil: // never create a group this rank failed to set up, whatever the answer
		return setup
	}
	return nil
}

// Close stops the coordinator (if this runtime serves it in process; a
// coordinator process exits by itself once no rank is connected) and the engine
// (if the runtime created it). Groups must be closed first.
func (rt *Runtime) Close() {
	rt.mu.Lock()
	l := rt.link
	rt.link = nil
	rt.mu.Unlock()
	if l != nil { // outside rt.mu: a failover in progress takes it
		l.close()
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.stopCoordinator()
	if rt.engine != nil && rt.ownEngine {
		rt.engine.Close()
	}
	rt.engine = nil
}

// extensionWait bounds how long an extension waits for its slot
// (upstream's registration wait).
const extensionWait = 30 * time.Second

// initTimeout bounds rendezvous (MC_PG_INIT_TIMEOUT seconds, default 300 as
// upstream's group-ready wait).
func initTimeout() time.Duration {
	return envvars.PGInitTimeout.Duration(defaultInitTimeout)
}

// addGroup and dropGroup keep the registry of live groups that a
// coordinator failover resumes.
func (rt *Runtime) addGroup(g *Group) {
	rt.groupsMu.Lock()
	defer rt.groupsMu.Unlock()
	if rt.groups == nil {
		rt.groups = map[*Group]struct{}{}
	}
	rt.groups[g] = struct{}{}
}

func (rt *Runtime) dropGroup(g *Group) {
	rt.groupsMu.Lock()
	defer rt.groupsMu.Unlock()
	delete(rt.groups, g)
}

// groupList returns the live groups.
func (rt *Runtime) groupList() []*Group {
	rt.groupsMu.Lock()
	defer rt.groupsMu.Unlock()
	gs := make([]*Group, 0, len(rt.groups))
	for g := range rt.groups {
		gs = append(gs, g)
	}
	return gs
}

// groupCount is the number of live groups.
func (rt *Runtime) groupCount() int {
	rt.groupsMu.Lock()
	defer rt.groupsMu.Unlock()
	return len(rt.groups)
}
