package backend

import (
	"context"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// coordinatorServer serves group rendezvous and membership over gRPC.
type coordinatorServer struct {
	coordpb.UnimplementedCoordinatorServer
	mu    sync.Mutex
	table joinTable
	// groups holds each formed group's membership (coordinator_sync.go).
	groups map[string]*groupMembers
	srv    *grpc.Server
	ln     net.Listener
}

// startCoordinator listens on host:0 and serves until stop.
func startCoordinator(host string) (*coordinatorServer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("coordinator listen: %w", err)
	}
	c := &coordinatorServer{srv: grpc.NewServer(), ln: ln, groups: map[string]*groupMembers{}}
	c.table.formed = c.formed
	coordpb.RegisterCoordinatorServer(c.srv, c)
	go c.srv.Serve(ln)
	return c, nil
}

func (c *coordinatorServer) addr() string { return c.ln.Addr().String() }

func (c *coordinatorServer) stop() { c.srv.Stop() }

// Join implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Join(ctx context.Context, r *coordpb.JoinRequest) (*coordpb.JoinResponse, error) {
	if r.GetExtension() {
		return c.extend(r)
	}
	c.mu.Lock()
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

// dialCoordinator opens a client connection (lazily connected).
func dialCoordinator(addr string) (*grpc.ClientConn, coordpb.CoordinatorClient, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator %s: %w", addr, err)
	}
	return conn, coordpb.NewCoordinatorClient(conn), nil
}
