package backend

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// The coordinator (inside rank 0's runtime here) is stopped; then rank 2
// dies, before or after the ranks noticed the coordinator's loss. The survivors fail over to a coordinator of term 1, seeded from
// their views, and reconcile rank 2's death there as usual: the op they
// were running completes without an error, with rank 2 in its hint, and
// every later op runs among them. A replacement for rank 2 then joins
// through the coordinator of the new term.
func TestCoordinatorLossThenRankDeath(t *testing.T) {
	e := found(t, 4, 4, false)
	e.each(func(t *testing.T, r int, g *Group) { allReduceRanks(t, r, g, 10) })
	e.rts[0].mu.Lock()
	e.rts[0].coord.stop()
	e.rts[0].mu.Unlock()
	e.kill(2)
	e.each(func(t *testing.T, r int, g *Group) {
		buf := f32bytes(float32(r + 1))
		w, err := g.AllReduce(buf, 1, Float32, Sum)
		expectFailedOp(t, g, "all_reduce across rank 2's death", w, err, 2, false)
		if !bytes.Equal(buf, f32bytes(7)) {
			t.Errorf("rank %d: all_reduce across the death = %v, want 7 (the survivors' sum)", r, buf)
		}
		survivorsContinue(t, g)
	})
	// A replacement started now finds the coordinator of the new term.
	e.extend(2, 4, 4)
	e.activate(2, "1111")
	e.each(func(t *testing.T, r int, g *Group) { allReduceRanks(t, r, g, 10) })
}

// The coordinator and rank 0 (the rank that ran it) go together; the
// survivors elect a new coordinator among themselves, which drops rank 0
// when it does not come back, and their ops run among them.
func TestCoordinatorAndRank0LostTogether(t *testing.T) {
	e := found(t, 4, 4, false)
	e.each(func(t *testing.T, r int, g *Group) { allReduceRanks(t, r, g, 10) })
	e.kill(0)
	e.each(func(t *testing.T, r int, g *Group) {
		buf := f32bytes(float32(r + 1))
		w, err := g.AllReduce(buf, 1, Float32, Sum)
		expectFailedOp(t, g, "all_reduce across rank 0's death", w, err, 0, true)
		if !bytes.Equal(buf, f32bytes(9)) {
			t.Errorf("rank %d: all_reduce across the death = %v, want 9 (the survivors' sum)", r, buf)
		}
		if m := mask(g); m != "0111" {
			t.Errorf("rank %d: mask %s after rank 0's death", r, m)
		}
		buf = f32bytes(float32(r + 1))
		w, err = g.AllReduce(buf, 1, Float32, Sum)
		must(t, g, "all_reduce among the survivors", w, err)
		if !bytes.Equal(buf, f32bytes(9)) || !w.LocalSuccess() || len(w.FailedRanks()) != 0 {
			t.Errorf("rank %d: all_reduce among the survivors = %v, success %v, failed %v", r, buf, w.LocalSuccess(), w.FailedRanks())
		}
	})
}

// pingClient is a coordinator client whose Ping runs ping.
type pingClient struct {
	coordpb.CoordinatorClient
	ping func(ctx context.Context) (*coordpb.PingResponse, error)
}

func (p pingClient) Ping(ctx context.Context, _ *coordpb.PingRequest, _ ...grpc.CallOption) (*coordpb.PingResponse, error) {
	return p.ping(ctx)
}

// A probe whose deadline passed long after it was due (the rank was
// stopped while it waited) asks again before it declares the coordinator
// lost; one that timed out on time (a hung coordinator) does not.
func TestProbeDoesNotTakeItsOwnSleepForTheCoordinatorsLoss(t *testing.T) {
	rt := shortTimeoutRuntime() // the probe waits 500 ms
	defer rt.Close()
	l := &coordLink{rt: rt}
	wait := rt.coordinatorLossAfter()
	var calls int
	woken := pingClient{ping: func(ctx context.Context) (*coordpb.PingResponse, error) {
		calls++
		if calls == 1 { // as if the process was stopped through the deadline
			time.Sleep(2 * wait)
			return nil, status.Error(codes.DeadlineExceeded, "deadline passed")
		}
		return &coordpb.PingResponse{Term: 3}, nil
	}}
	if !l.answers(woken, 3) || calls != 2 {
		t.Errorf("after a late deadline: answers false or %d pings, want true after 2", calls)
	}
	calls = 0
	hung := pingClient{ping: func(ctx context.Context) (*coordpb.PingResponse, error) {
		calls++
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}}
	if l.answers(hung, 3) || calls != 1 {
		t.Errorf("a hung coordinator: answers true or %d pings, want false after 1", calls)
	}
}

// missCountingStore is a MemStore that counts the waits that time out: in
// torch's TCPStore each costs a round trip to cancel it and two warnings
// that resolve the socket's peer name (5 s when the resolver drops the
// query: issue 46 saw a survivor's barrier take 5.01 s so).
type missCountingStore struct {
	*MemStore
	misses atomic.Int64
}

func (s *missCountingStore) Get(key string, timeout time.Duration) ([]byte, error) {
	b, err := s.MemStore.Get(key, timeout)
	if err != nil && timeout > 0 {
		s.misses.Add(1)
	}
	return b, err
}

// In manual mode the dead rank stays in the mask, so every op after the
// death fails again with it in the hint: each of those ops gets a
// coordinator reply (the sync, and the watch's views), and a rank acts on
// one only after looking for a later coordinator term in the store. That
// look must not be a wait that times out (Store.Get with NoWait); before,
// it was a wait of 1 ms, one per reply.
func TestRepliesAfterAFailureLookAtTheStoreWithoutWaiting(t *testing.T) {
	store := &missCountingStore{MemStore: NewMemStore()}
	rts, gs := startRanks(t, 3, shortTimeoutRuntime, GroupConfig{GroupID: "manual", Store: store, Manual: true,
		CollSlot: 4096, P2PSlot: 4096})
	e := &elasticRanks{t: t, rts: rts, gs: gs}
	t.Cleanup(func() {
		for r := len(e.gs) - 1; r >= 0; r-- {
			e.kill(r)
		}
	})
	e.each(func(t *testing.T, r int, g *Group) { allReduceRanks(t, r, g, 6) })
	e.kill(2)
	before := store.misses.Load()
	e.each(func(t *testing.T, r int, g *Group) {
		for i := range 6 {
			what, w, err := "barrier", (*Work)(nil), error(nil)
			start := time.Now()
			if i%2 == 0 {
				what = "all_reduce"
				w, err = g.AllReduce(f32bytes(float32(r+1)), 1, Float32, Sum)
			} else {
				w, err = g.Barrier()
			}
			must(t, g, what, w, err)
			if err != nil {
				return
			}
			if took := time.Since(start); took > g.collTimeout()+2*time.Second {
				t.Errorf("rank %d: %s %d took %v", r, what, i, took)
			}
			if w.LocalSuccess() || fmt.Sprint(w.FailedRanks()) != "[2]" {
				t.Errorf("rank %d: %s %d: success %v failed %v", r, what, i, w.LocalSuccess(), w.FailedRanks())
			}
		}
	})
	if n := store.misses.Load() - before; n != 0 {
		t.Errorf("the survivors' ops made %d waits of the store time out", n)
	}
}
