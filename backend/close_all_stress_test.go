package backend

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/ep"
	"github.com/mooncake-go/mooncake/transfer"
)

// dispatchArgs is a dispatch of n tokens of hidden 128 over 4 experts on
// 2 ranks, top-1, token i to expert i%4: half of them to each rank.
func dispatchArgs(n int) *ep.DispatchArgs {
	const h, e = 128, 4
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64(i % e)
	}
	return &ep.DispatchArgs{X: make([]uint16, n*h), TopkIdx: idx, T: n, K: 1, N: n, H: h, E: e,
		Active: []int32{1, 1}, TimeoutUs: 200_000, RecvX: make([]byte, 2*2*n*h*2), RecvCount: make([]int32, 2),
		SrcInfo: make([]int32, 2*2*n), LayoutRange: make([]int64, 2*2)}
}

// epRank runs dispatches on b until a call fails; any failure but
// ep.ErrClosed fails the test. A dispatch that completes with the peer
// still active holds every token sent to this rank (n/2 from each rank).
func epRank(t *testing.T, b *ep.Buffer, n int) {
	for {
		d := dispatchArgs(n)
		if err := b.Dispatch(d); err != nil {
			if !errors.Is(err, ep.ErrClosed) {
				t.Errorf("ep rank %d: dispatch ended with %v, want success or ErrClosed", b.Rank(), err)
			}
			return
		}
		if d.Active[1-b.Rank()] == 1 && d.RecvCount[0]+d.RecvCount[1] != int32(n) {
			t.Errorf("ep rank %d: received %v tokens, want %d", b.Rank(), d.RecvCount, n)
		}
	}
}

// TestClosingEverythingWhileOpsRun: each of two ranks has one engine that
// its collectives runtime and its EP buffer share. While collectives,
// point-to-point ops and EP dispatches run on their own goroutines, the
// groups and the EP buffers are closed, each from its own goroutine, in a
// random order and after a random delay; then the runtimes and the
// engines. Every op ends: completed, ErrClosed, or, for a collective or
// point-to-point op whose peer's group closed first, a peer failure (a
// destroyed peer is a failed one). No crash, no hang, and every call after
// its object's close is refused; many rounds, under -race.
func TestClosingEverythingWhileOpsRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 17))
	start := time.Now()
	for round := 0; round < 30 && time.Since(start) < 40*time.Second; round++ {
		closeEverything(t, rng, round%2 == 1)
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
	}
}

// epTokens is the number of tokens per EP dispatch.
const epTokens = 8

func closeEverything(t *testing.T, rng *rand.Rand, forceTCP bool) {
	engines := make([]*transfer.Engine, 2)
	for r := range engines {
		e, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.1", MetadataServer: transfer.P2PHandshake,
			ForceTCP: forceTCP, TransferTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		engines[r] = e
	}
	r := 0
	rts, gs := startRanks(t, 2, func() *Runtime {
		rt := shortTimeoutRuntime()
		if err := rt.SetEngine(engines[r]); err != nil {
			t.Fatal(err)
		}
		r++
		return rt
	}, GroupConfig{GroupID: "everything", Store: NewMemStore(), CollSlot: testSlot, P2PSlot: testSlot})
	bufs := make([]*ep.Buffer, 2)
	peers := make([]ep.Peer, 2)
	for r, e := range engines {
		b, err := ep.NewBuffer(ep.Config{Rank: r, Ranks: 2, Bytes: ep.SizeHint(epTokens, 128, 2, 4), Engine: e})
		if err != nil {
			t.Fatal(err)
		}
		bufs[r], peers[r] = b, b.Self()
	}
	for _, b := range bufs {
		if err := b.Connect(peers); err != nil {
			t.Fatal(err)
		}
	}

	const elems = 16 * testSlot / 4
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(3)
		go func() {
			defer wg.Done()
			for {
				buf := filled(float32(r+1), elems)
				w, err := g.AllReduce(buf, elems, Float32, Sum, Inline())
				checkOpOutcome(t, g, "all_reduce", w, err, buf, ErrPeer)
				if err != nil || w.Err() != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			sendRecvUntilClosed(t, g, 2*testSlot, ErrPeer)
		}()
		go func() {
			defer wg.Done()
			epRank(t, bufs[r], epTokens)
		}()
	}
	time.Sleep(time.Duration(rng.IntN(20_000)) * time.Microsecond)
	closers := []func(){}
	for r := range gs {
		closers = append(closers, func() { gs[r].Close() }, func() { bufs[r].Close() })
	}
	rng.Shuffle(len(closers), func(i, j int) { closers[i], closers[j] = closers[j], closers[i] })
	var closing sync.WaitGroup
	for _, c := range closers {
		closing.Add(1)
		go func() {
			defer closing.Done()
			c()
		}()
		time.Sleep(time.Duration(rng.IntN(2_000)) * time.Microsecond)
	}
	closing.Wait()
	waitOps(t, &wg, "their groups and buffers were closed")
	for r := range gs {
		if _, err := gs[r].AllReduce(make([]byte, 4), 1, Float32, Sum, Inline()); !errors.Is(err, ErrClosed) {
			t.Errorf("rank %d: all_reduce after Close: %v, want ErrClosed", r, err)
		}
		if err := bufs[r].Dispatch(dispatchArgs(epTokens)); !errors.Is(err, ep.ErrClosed) {
			t.Errorf("rank %d: dispatch after Close: %v, want ErrClosed", r, err)
		}
		rts[r].Close()
		if err := engines[r].Close(); err != nil {
			t.Errorf("rank %d: engine close: %v", r, err)
		}
	}
}
