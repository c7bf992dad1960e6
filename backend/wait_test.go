package backend

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/transfer/channel"
)

// On an oversubscribed host a collective spins in its first wait only;
// point-to-point waits, and every wait where each rank has a CPU, keep
// the policy's spin.
func TestWaitPolicySpinsOncePerCollectiveWhenOversubscribed(t *testing.T) {
	base := channel.Policy{Spin: 5, YieldFor: 500}
	g := &Group{policy: base, spinOnce: true}
	if p := g.waitPolicy(chColl); p != base {
		t.Fatalf("first wait of a collective: %+v, want %+v", p, base)
	}
	for range 2 {
		if p := g.waitPolicy(chColl); p.Spin != 0 || p.YieldFor != base.YieldFor {
			t.Fatalf("later wait of the same collective: %+v, want no spin and the same yield", p)
		}
		if p := g.waitPolicy(chP2P); p != base {
			t.Fatalf("point-to-point wait: %+v, want %+v", p, base)
		}
	}
	g.collSpun = false // as runOp does for the next collective
	if p := g.waitPolicy(chColl); p != base {
		t.Fatalf("first wait of the next collective: %+v, want %+v", p, base)
	}
	g = &Group{policy: base}
	for range 3 {
		if p := g.waitPolicy(chColl); p != base {
			t.Fatalf("a CPU per rank: %+v, want %+v", p, base)
		}
	}
}

// Each collective starts with its spin unspent.
func TestEachCollectiveStartsWithItsSpin(t *testing.T) {
	const n = 4
	rts, gs := startRanks(t, n, NewRuntime, GroupConfig{GroupID: "spin", Store: NewMemStore()})
	defer func() {
		for r := range n {
			gs[r].Close()
			rts[r].Close()
		}
	}()
	for r := range n {
		if gs[r].spinOnce != (n > runtime.NumCPU()) {
			t.Errorf("rank %d: %d ranks on %d CPUs, and spinOnce is %v", r, n, runtime.NumCPU(), gs[r].spinOnce)
		}
		gs[r].spinOnce = true // whatever this host's CPUs: the reset is what is tested
	}
	runAll(t, gs[:n], time.Minute, func(t *testing.T, r int, g *Group) {
		for range 3 {
			w, err := g.Barrier(Inline())
			if err == nil {
				_, err = w.Wait(0)
			}
			if err != nil {
				t.Errorf("rank %d: barrier: %v", r, err)
				return
			}
			w, err = g.start(g.coll, func() error {
				if g.collSpun {
					return fmt.Errorf("%w: the collective starts with its spin spent", ErrInvalid)
				}
				return nil
			}, []OpOption{Inline()})
			if err == nil {
				_, err = w.Wait(0)
			}
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
		}
	})
}
