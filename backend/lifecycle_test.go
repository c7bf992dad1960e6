package backend

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/transfer"
)

// closeBoth closes every group of gs at once, each from its own goroutine
// (as two processes destroying their groups), and waits for them.
func closeBoth(gs []*Group) {
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.Close()
		}()
	}
	wg.Wait()
}

// checkOpOutcome accepts what an op that ran into its group's Close may
// end with: completed, or ErrClosed (or one of the errors in accept).
// Anything else fails the test. A completed all_reduce of rank+1 (buf)
// without a failure holds the sum over the active ranks (after the peer's
// close, a reconciliation may have left this rank alone).
func checkOpOutcome(t *testing.T, g *Group, what string, w *Work, err error, buf []byte, accept ...error) {
	t.Helper()
	accepted := func(err error) bool {
		for _, a := range append(accept, ErrClosed) {
			if errors.Is(err, a) {
				return true
			}
		}
		return false
	}
	if err != nil {
		if !accepted(err) {
			t.Errorf("rank %d: %s refused with %v, want ErrClosed", g.Rank(), what, err)
		}
		return
	}
	if _, err := w.Wait(0); err != nil {
		if !accepted(err) {
			t.Errorf("rank %d: %s ended with %v, want success or ErrClosed", g.Rank(), what, err)
		}
		return
	}
	want := 0
	for p, a := range g.View().Active {
		if a {
			want += p + 1
		}
	}
	if w.LocalSuccess() && buf != nil && !bytes.Equal(buf, filled(float32(want), len(buf)/4)) {
		t.Errorf("rank %d: %s completed with a wrong result (starts %v, want %d)", g.Rank(), what, buf[:8], want)
	}
}

// sendRecvUntilClosed sends n-byte messages from rank 0 to rank 1 of g
// (blocking ops, on g's point-to-point queues) until one ends with an
// error; checkOpOutcome judges every op (accept as there).
func sendRecvUntilClosed(t *testing.T, g *Group, n int, accept ...error) {
	buf := make([]byte, n)
	for {
		var w *Work
		var err error
		if g.Rank() == 0 {
			w, err = g.Send(buf, 1, Inline())
		} else {
			w, err = g.Recv(buf, 0, Inline())
		}
		checkOpOutcome(t, g, "send/recv", w, err, nil, accept...)
		if err != nil || w.Err() != nil {
			return
		}
	}
}

// waitOps waits for the op goroutines of wg, at most 30 s after what
// happened (it ends them all).
func waitOps(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("ops still running 30 s after %s", what)
	}
}

// closeWhileOpsRun runs one round: two ranks issue collectives (blocking,
// i.e. inline, and async) and point-to-point ops on several goroutines
// while both groups are closed after delay. Every op must end (completed
// or ErrClosed) and every op after Close must be refused with ErrClosed.
func closeWhileOpsRun(t *testing.T, delay time.Duration) {
	rts, gs := startRanks(t, 2, shortTimeoutRuntime, GroupConfig{GroupID: "close", Store: NewMemStore(), CollSlot: testSlot, P2PSlot: testSlot})
	defer func() {
		for _, rt := range rts {
			rt.Close()
		}
	}()
	const elems = 64 * testSlot / 4 // 64 chunks: the close lands inside an op
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(2)
		go func() { // collectives: one issuer per rank keeps the order identical
			defer wg.Done()
			for i := 0; ; i++ {
				buf := filled(float32(r+1), elems)
				var w *Work
				var err error
				if i%3 == 2 {
					w, err = g.AllReduce(buf, elems, Float32, Sum) // queued
				} else {
					w, err = g.AllReduce(buf, elems, Float32, Sum, Inline())
				}
				checkOpOutcome(t, g, "all_reduce", w, err, buf)
				if err != nil || w.Err() != nil {
					return
				}
			}
		}()
		go func() { // point-to-point on its own queues, blocking
			defer wg.Done()
			sendRecvUntilClosed(t, g, 3*testSlot)
		}()
	}
	time.Sleep(delay)
	closeBoth(gs)
	waitOps(t, &wg, "their groups were closed")
	for r, g := range gs {
		if _, err := g.AllReduce(make([]byte, 4), 1, Float32, Sum, Inline()); !errors.Is(err, ErrClosed) {
			t.Errorf("rank %d: all_reduce after Close: %v, want ErrClosed", r, err)
		}
		if _, err := g.Barrier(); !errors.Is(err, ErrClosed) {
			t.Errorf("rank %d: barrier after Close: %v, want ErrClosed", r, err)
		}
	}
}

// Closing a group while its ops run on other goroutines (the inline op of
// a blocking torch call included) must neither crash nor hang: Close waits
// for the ops, which end with ErrClosed, before it unmaps the buffer.
func TestCloseWhileOpsRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	start := time.Now()
	for i := 0; i < 20 && time.Since(start) < 40*time.Second; i++ {
		closeWhileOpsRun(t, time.Duration(rng.IntN(20_000))*time.Microsecond)
		if t.Failed() {
			t.Fatalf("round %d failed", i)
		}
	}
}

// A subgroup and WORLD of the same ranks share each engine's segments of
// the peers: destroying the subgroup must leave WORLD's ops untouched (no
// failure reported, the right result).
func TestClosingSubgroupLeavesWorldUntouched(t *testing.T) {
	store := NewMemStore()
	rts, world := startRanks(t, 2, shortTimeoutRuntime, GroupConfig{GroupID: "world", Store: store})
	defer func() {
		for r := range rts {
			world[r].Close()
			rts[r].Close()
		}
	}()
	sub, err := joinRanks(rts, GroupConfig{GroupID: "sub", Store: store})
	if err != nil {
		t.Fatal(err)
	}
	allReduceOK := func(t *testing.T, g *Group, what string) {
		buf := f32bytes(float32(g.Rank() + 1))
		w, err := g.AllReduce(buf, 1, Float32, Sum)
		must(t, g, what, w, err)
		if !bytes.Equal(buf, f32bytes(3)) || !w.LocalSuccess() || len(w.FailedRanks()) != 0 {
			t.Errorf("rank %d: %s: %v, local success %v, failed %v; want [3], true, []",
				g.Rank(), what, buf, w.LocalSuccess(), w.FailedRanks())
		}
	}
	runAll(t, sub, 30*time.Second, func(t *testing.T, _ int, g *Group) { allReduceOK(t, g, "sub all_reduce") })
	closeBoth(sub)
	runAll(t, world, 30*time.Second, func(t *testing.T, _ int, g *Group) {
		for i := range 3 {
			allReduceOK(t, g, fmt.Sprintf("world all_reduce %d after the subgroup's close", i))
		}
		if v := g.View(); fmt.Sprint(v.Active) != "[true true]" {
			t.Errorf("rank %d: world view %v after the subgroup's close", g.Rank(), v.Active)
		}
	})
}

// TestEngineKeptWhileGroupsUseIt: the runtime refuses to drop an external
// engine (SetEngine(nil), which lets the C layer release it) while a group
// still uses it, and allows it once the groups are closed.
func TestEngineKeptWhileGroupsUseIt(t *testing.T) {
	e, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.1", MetadataServer: transfer.P2PHandshake})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rt := NewRuntime()
	defer rt.Close()
	if err := rt.SetEngine(e); err != nil {
		t.Fatal(err)
	}
	_, gs := startRanks(t, 1, func() *Runtime { return rt }, GroupConfig{GroupID: "keep", Store: NewMemStore()})
	if err := rt.SetEngine(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetEngine(nil) with a live group = %v, want ErrInvalid", err)
	}
	gs[0].Close()
	if err := rt.SetEngine(nil); err != nil {
		t.Fatalf("SetEngine(nil) after the group closed: %v", err)
	}
}
