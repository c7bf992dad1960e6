package backend

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
	"github.com/mooncake-go/mooncake/internal/envvars"
)

// Who the coordinator admits, and what it accepts from them.
//
// The job secret: the rank that starts the coordinator (the founding rank
// 0) draws a random secret, gives it to the coordinator and puts it into
// the rendezvous store under SecretKey, before the address; every other
// rank reads it from there. Only the job reaches its store, so a client
// that reaches the coordinator's port but is no member of the job cannot
// present it. Every RPC carries it as gRPC metadata (secretHeader); the
// coordinator refuses a call without it, or with another, as
// Unauthenticated before the call touches any state. A coordinator an
// operator runs (MC_PG_COORDINATOR=host:port) takes its secret from
// MC_PG_COORDINATOR_SECRET, and so do the ranks that dial it; where that is
// unset on the coordinator it admits every client.
//
// Declared sizes: a Join's size and slot count are capped at MaxGroupRanks
// and MaxGroupSlots, its group id and layout at maxNameBytes, before the
// coordinator sizes anything from them.

// SecretKey is the Store key under which the rank that starts the
// coordinator publishes the job secret.
const SecretKey = "coordinator_secret"

// secretHeader is the gRPC metadata key that carries the job secret.
const secretHeader = "mooncake-pg-secret"

// MaxGroupRanks is the most ranks a group can have: groups of up to
// MaxGroupSlots have membership (fault tolerance, elastic joins); larger
// ones, up to this, run without it. The coordinator refuses a Join that
// declares more.
const MaxGroupRanks = 1024

// maxNameBytes bounds a Join's group id and layout key.
const maxNameBytes = 1024

// newSecret draws a job secret: 32 random bytes, hex.
func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("draw the coordinator secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// operatorSecret is the secret for a coordinator an operator runs:
// MC_PG_COORDINATOR_SECRET ("" when unset).
func operatorSecret() string {
	v, _ := envvars.PGCoordinatorSecret.Lookup()
	return v
}

// admit is the coordinator's unary interceptor: a call must carry the
// job secret (when the coordinator has one), be meant for this
// coordinator's term (coordinator_term.go) and, for a Join, have sizes
// within the limits.
func (c *coordinatorServer) admit(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if c.secret != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		got := md.Get(secretHeader)
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), []byte(c.secret)) != 1 {
			return nil, status.Error(codes.Unauthenticated, "coordinator: the call does not carry this job's secret (from the rendezvous store, or MC_PG_COORDINATOR_SECRET)")
		}
	}
	if err := c.checkTerm(ctx); err != nil {
		return nil, err
	}
	if r, ok := req.(*coordpb.JoinRequest); ok {
		if err := checkJoin(r); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	return h(ctx, req)
}

// checkJoin refuses a Join whose declared sizes exceed the group limits.
func checkJoin(r *coordpb.JoinRequest) error {
	size, slots, rank := r.GetSize(), r.GetMaxSize(), r.GetRank()
	switch {
	case size <= 0 || size > MaxGroupRanks:
		return fmt.Errorf("%w: group size %d: want 1 to %d (MaxGroupRanks)", ErrInvalid, size, MaxGroupRanks)
	case slots > MaxGroupSlots && slots != size:
		return fmt.Errorf("%w: %d slots for %d ranks: at most %d (MaxGroupSlots), or exactly the size", ErrInvalid, slots, size, MaxGroupSlots)
	case rank < 0 || rank >= max(size, slots):
		return fmt.Errorf("%w: rank %d of %d slots", ErrInvalid, rank, max(size, slots))
	case len(r.GetGroupId()) > maxNameBytes || len(r.GetLayout()) > maxNameBytes:
		return fmt.Errorf("%w: group id or layout longer than %d bytes", ErrInvalid, maxNameBytes)
	}
	return nil
}

// withSecret is the ranks' unary interceptor: it attaches secret to every
// call ("" attaches nothing).
func withSecret(secret string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if secret != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, secretHeader, secret)
		}
		return inv(ctx, method, req, reply, cc, opts...)
	}
}
