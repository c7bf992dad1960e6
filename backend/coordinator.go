package backend

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

// coordinatorServer serves group rendezvous and membership over gRPC.
type coordinatorServer struct {
	coordpb.UnimplementedCoordinatorServer
	mu    sync.Mutex
	table joinTable
	// ready completes each founding once every founder set up (coordinator_ready.go).
	ready readyTable
	// groups holds each formed group's membership (coordinator_sync.go).
	groups map[string]*groupMembers
	srv    *grpc.Server
	ln     net.Listener
	// secret is the job secret every call must carry ("": none;
	// coordinator_admit.go).
	secret string
	// term is this coordinator's term: 0 for the job's first, one more for
	// each failover (coordinator_term.go, failover.go).
	term uint64
}

// startCoordinator listens on host:0 and serves as the coordinator of
// term, admitting calls that carry secret, until stop; with MC_TLS_* set it
// serves TLS.
func startCoordinator(host, secret string, term uint64) (*coordinatorServer, error) {
	cfg, err := tlsconf.FromEnv().Server()
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("coordinator listen: %w", err)
	}
	return serveCoordinator(ln, nil, secret, term, cfg), nil
}

// serveCoordinator serves the coordinator of term on ln, admitting only
// calls that carry secret ("": every call) and are meant for term, over
// TLS with cfg when it is not nil; conns, if not nil, is told of every
// client connection that opens and closes.
func serveCoordinator(ln net.Listener, conns ConnWatcher, secret string, term uint64, cfg *tls.Config) *coordinatorServer {
	c := &coordinatorServer{ln: ln, groups: map[string]*groupMembers{}, secret: secret, term: term}
	opts := append([]grpc.ServerOption{grpc.UnaryInterceptor(c.admit)}, tlsconf.ServerOptions(cfg)...)
	if conns != nil {
		opts = append(opts, grpc.StatsHandler(connStats{conns}))
	}
	c.srv = grpc.NewServer(opts...)
	c.table.formed = c.formed
	coordpb.RegisterCoordinatorServer(c.srv, c)
	go c.srv.Serve(ln)
	return c
}

func (c *coordinatorServer) addr() string { return c.ln.Addr().String() }

func (c *coordinatorServer) stop() { c.srv.Stop() }

// ConnWatcher is told when a client connection to a coordinator opens and
// when it closes (cmd/mooncake_pg_coordinator exits once none is left).
type ConnWatcher interface {
	ConnOpened()
	ConnClosed()
}

// connStats adapts a ConnWatcher to gRPC's stats.Handler.
type connStats struct{ w ConnWatcher }

func (s connStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (s connStats) HandleRPC(context.Context, stats.RPCStats)                         {}
func (s connStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (s connStats) HandleConn(_ context.Context, st stats.ConnStats) {
	switch st.(type) {
	case *stats.ConnBegin:
		s.w.ConnOpened()
	case *stats.ConnEnd:
		s.w.ConnClosed()
	}
}

// Coordinator is a coordinator serving outside any rank's process (the
// mooncake_pg_coordinator command), so that the death of the rank that
// started it is survived like any other rank's.
type Coordinator struct{ c *coordinatorServer }

// ServeCoordinator serves the membership coordinator of term (0: the
// job's first; failover.go) on ln until Stop, admitting only calls that
// carry secret ("": every call), over TLS with cfg when it is not nil
// (mutual when cfg requires client certificates); conns (may be nil)
// follows its client connections.
func ServeCoordinator(ln net.Listener, conns ConnWatcher, secret string, term uint64, cfg *tls.Config) *Coordinator {
	return &Coordinator{serveCoordinator(ln, conns, secret, term, cfg)}
}

// Addr is the address clients dial.
func (c *Coordinator) Addr() string { return c.c.addr() }

// Stop closes the listener and every connection at once; calls in flight
// fail with Unavailable.
func (c *Coordinator) Stop() { c.c.stop() }

// Join implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Join(ctx context.Context, r *coordpb.JoinRequest) (*coordpb.JoinResponse, error) {
	if r.GetExtension() {
		return c.extend(ctx, r)
	}
	c.mu.Lock()
	if err := c.slotTaken(r); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	ch := c.table.join(r)
	c.mu.Unlock()
	select {
	case res := <-ch:
		if res.err != nil {
			return nil, status.Error(codes.InvalidArgument, res.err.Error())
		}
		return &coordpb.JoinResponse{Endpoints: res.eps, View: res.view}, nil
	case <-ctx.Done():
		c.mu.Lock()
		c.table.cancel(r.GetGroupId(), int(r.GetRank()), ch)
		c.mu.Unlock()
		select { // completed while we were cancelling
		case res := <-ch:
			if res.err == nil {
				return &coordpb.JoinResponse{Endpoints: res.eps, View: res.view}, nil
			}
		default:
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// slotTaken refuses a founding join (not an extension) of a formed group
// by a process new to it — none of the group's slots has its segment —
// for a slot that a live member holds: healthy, watching the group now,
// and active, awaiting activation or inactive. Founding joins are also how
// a group is re-initialised (destroy_process_group, then init under the
// same name), so a founder normally waits for the others; but a re-init
// comes from the members' own processes (their segments are in the group,
// in any slot), and a new process cannot take a slot whose holder is alive
// whatever it waits for. Without this, a late rank that forgot
// is_extension=True (upstream's three-argument options have none) waited
// as the founder of a round that never completes, until the init timeout
// (c.mu held).
func (c *coordinatorServer) slotTaken(r *coordpb.JoinRequest) error {
	gm := c.groups[r.GetGroupId()]
	rank := int(r.GetRank())
	if gm == nil || gm.m == nil || !gm.m.valid(rank) {
		return nil
	}
	m, seg := gm.m, r.GetEndpoint().GetSegment()
	for _, ep := range m.eps {
		if ep.Segment == seg {
			return nil // a member's process (or a founder without an endpoint)
		}
	}
	s := m.state[rank]
	if !m.healthy[rank] || gm.watching[rank] == 0 || s != MemberActive && s != MemberAwaiting && s != MemberInactive {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"group %q is already formed and its rank %d is held by a live member (%s, %s): a process joining a formed "+
			"group must pass is_extension=True (MooncakeBackendOptions(max_group_size, is_extension=True)) to take a "+
			"free slot or a dead member's; only the members' own processes re-initialise it (destroy_process_group, "+
			"then init)", r.GetGroupId(), rank, s, m.eps[rank].Segment)
}

// dialCoordinator opens a client connection (lazily connected) to the
// coordinator of term, whose calls carry secret and term. The channel
// never goes idle: a coordinator process exits once no client is
// connected, so a rank keeps its connection for as long as it lives. With
// MC_TLS_* set it dials TLS.
func dialCoordinator(addr, secret string, term uint64) (*grpc.ClientConn, coordpb.CoordinatorClient, error) {
	cfg, err := tlsconf.FromEnv().Client()
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator %s: %w", addr, err)
	}
	conn, err := grpc.NewClient(addr, tlsconf.DialOption(cfg),
		grpc.WithIdleTimeout(0), grpc.WithChainUnaryInterceptor(withSecret(secret), withTerm(term)))
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator %s: %w", addr, err)
	}
	conn.Connect()
	return conn, coordpb.NewCoordinatorClient(conn), nil
}
