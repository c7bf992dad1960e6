package backend

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// dialTest dials addr with secret, closing the connection when t ends.
func dialTest(t *testing.T, addr, secret string) coordpb.CoordinatorClient {
	t.Helper()
	conn, client, err := dialCoordinator(addr, secret, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return client
}

// A Join that declares more ranks or slots than a group can have is
// refused (InvalidArgument) before the coordinator sizes anything from it:
// 2^31-1 ranks once made it allocate a 16 GiB endpoint table.
func TestJoinBeyondGroupLimitsIsRefusedWithoutAllocating(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := serveCoordinator(ln, nil, "", 0, nil)
	defer c.stop()
	client := dialTest(t, c.addr(), "")
	join := func(r *coordpb.JoinRequest) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := client.Join(ctx, r)
		return err
	}
	// Warm the connection up, so that its allocations do not count below.
	if err := join(joinReq("warm", 0, 1, "s")); err != nil {
		t.Fatal(err)
	}
	huge := joinReq("huge", 0, 1<<31-1, "s")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err = join(huge)
	runtime.ReadMemStats(&after)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Join of 2^31-1 ranks: %v, want InvalidArgument", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("refusing a Join of 2^31-1 ranks allocated %d bytes", got)
	}
	slots := joinReq("slots", 0, 2, "s")
	slots.MaxSize = 1<<31 - 1
	for name, r := range map[string]*coordpb.JoinRequest{
		"size over MaxGroupRanks":           joinReq("big", 0, MaxGroupRanks+1, "s"),
		"slots over MaxGroupSlots":          slots,
		"negative size":                     joinReq("neg", 0, -5, "s"),
		"rank outside the group":            joinReq("out", 7, 2, "s"),
		"group id longer than maxNameBytes": joinReq(string(make([]byte, maxNameBytes+1)), 0, 1, "s"),
	} {
		if err := join(r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	// The limits themselves are admitted: a group of MaxGroupSlots slots
	// founded by one rank waits for the others (so the call times out).
	atLimit := joinReq("limit", 0, 2, "s")
	atLimit.MaxSize = MaxGroupSlots
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := client.Join(ctx, atLimit); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Join within the limits: %v, want it to wait for the second founder", err)
	}
}

// Only the job's ranks, which read the secret from the rendezvous store,
// are admitted: a client that reaches the coordinator's port without the
// secret, or with another, can neither found a group nor follow or change
// the job's; the real ranks go on unaffected.
func TestCoordinatorAdmitsOnlyTheJobSecret(t *testing.T) {
	store := NewMemStore()
	rts, gs := startRanks(t, 2, NewRuntime, GroupConfig{GroupID: "job", Store: store})
	defer func() {
		for r := range gs {
			gs[r].Close()
			rts[r].Close()
		}
	}()
	addr, err := store.Get(CoordinatorKey, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := store.Get(SecretKey, time.Second)
	if err != nil || len(secret) < 32 {
		t.Fatalf("job secret in the store: %q %v", secret, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, s := range map[string]string{"no secret": "", "a wrong secret": "0123456789abcdef0123456789abcdef"} {
		stray := dialTest(t, string(addr), s)
		if _, err := stray.Join(ctx, joinReq("stray", 0, 1, "s")); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: Join of a new group: %v, want Unauthenticated", name, err)
		}
		ext := joinReq("job", 1, 2, "s")
		ext.Extension = true
		if _, err := stray.Join(ctx, ext); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: extension Join into the job's group: %v, want Unauthenticated", name, err)
		}
		if _, err := stray.Sync(ctx, &coordpb.SyncRequest{GroupId: "job", Rank: 1, Failed: []int32{0}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: Sync reporting rank 0 failed: %v, want Unauthenticated", name, err)
		}
		if _, err := stray.Watch(ctx, &coordpb.WatchRequest{GroupId: "job"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: Watch: %v, want Unauthenticated", name, err)
		}
		if _, err := stray.Propose(ctx, &coordpb.ProposeRequest{GroupId: "job", Ranks: []int32{1}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: Propose deactivating rank 1: %v, want Unauthenticated", name, err)
		}
	}
	// The job's secret is admitted.
	member := dialTest(t, string(addr), string(secret))
	if _, err := member.Join(ctx, joinReq("solo", 0, 1, "s")); err != nil {
		t.Errorf("Join with the job's secret: %v", err)
	}
	// The real ranks were not disturbed: a full all_reduce succeeds.
	runAll(t, gs, 30*time.Second, func(t *testing.T, r int, g *Group) {
		buf := binary.LittleEndian.AppendUint32(nil, uint32(r+1))
		w, err := g.AllReduce(buf, 1, Int32, Sum)
		must(t, g, "all_reduce", w, err)
		if got := binary.LittleEndian.Uint32(buf); got != 3 || !w.LocalSuccess() {
			t.Errorf("rank %d: all_reduce %d, local success %v", r, got, w.LocalSuccess())
		}
	})
}
