package backend

import (
	"bytes"
	"fmt"
	"testing"
)

// One outcome per collective when a rank dies after its peers have what
// they need of an op but before it acknowledged it: the op's root waits
// for that acknowledgement only, its result complete, while the other
// survivors completed the op and met the death in the next one. Issue 46:
// 4 ranks, rank 0 killed during a 4 MiB broadcast from rank 3; rank 3
// returned local success False with hint [0], ranks 1 and 2 success.

// tailDeath runs 4 in-process ranks: rank 2 (in process, rank 0 serves
// the coordinator) takes root's lend of the
// broadcast of n bytes in 64 KiB slots (the pulled broadcast: one chunk),
// copies it and goes away without acknowledging it; the survivors check
// that the broadcast and the all_reduce after it end alike on each of
// them: the broadcast complete with the root's data and no failed rank,
// the all_reduce with rank 2 in its hint over the survivors' sum.
func tailDeath(t *testing.T, root int) {
	const n = 64 << 10
	want := filled(float32(root+1), n/4)
	deathScenario(t, 4, 2, n, func(g *Group) {
		w, err := g.start(g.coll, func() error {
			return g.pullFrom(root, g.pullSlot(0), make([]byte, n))
		}, nil)
		if err != nil {
			t.Errorf("rank 2: %v", err)
			return
		}
		w.Wait(0)
	}, func(t *testing.T, g *Group) {
		b := filled(-1, n/4)
		if g.Rank() == root {
			copy(b, want)
		}
		w, err := g.Broadcast(b, root)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Wait(0); err != nil {
			t.Fatalf("rank %d: broadcast raised: %v", g.Rank(), err)
		}
		if !w.LocalSuccess() || len(w.FailedRanks()) != 0 || !bytes.Equal(b, want) {
			t.Errorf("rank %d: broadcast whose data every survivor has: local success %v, failed %v, data right %v; want true, [], true",
				g.Rank(), w.LocalSuccess(), w.FailedRanks(), bytes.Equal(b, want))
		}
		buf := f32bytes(float32(g.Rank() + 1))
		w, err = g.AllReduce(buf, 1, Float32, Sum)
		expectFailedOp(t, g, "all_reduce after the broadcast", w, err, 2, false)
		if !bytes.Equal(buf, f32bytes(1+2+4)) {
			t.Errorf("rank %d: all_reduce after the death: %v, want the survivors' sum 7", g.Rank(), buf)
		}
		if v := g.View(); fmt.Sprint(v.Active) != "[true true false true]" {
			t.Errorf("rank %d: view %v", g.Rank(), v.Active)
		}
	})
}

func TestDeathBeforeAcknowledgingABroadcastLeavesOneOutcome(t *testing.T) {
	tailDeath(t, 3)
}

// The same in a pulled all_gather: rank 2 lends its block and reads every
// peer's but acknowledges none, so every survivor has every block and
// waits only for rank 2's acknowledgements. All of them complete the op
// with every block, rank 2's included, and say so in Ran (the plugin
// unpacks a list output by it: the view as the op completes already lacks
// rank 2); the next op reports rank 2.
func TestDeathBeforeAcknowledgingAnAllGatherLeavesOneOutcome(t *testing.T) {
	const n = 64 << 10
	block := func(r int) []byte { return filled(float32(10*r+1), n/4) }
	var want []byte
	for r := range 4 {
		want = append(want, block(r)...)
	}
	deathScenario(t, 4, 2, n, func(g *Group) {
		w, err := g.start(g.coll, func() error {
			s := g.pullSlot(0)
			if err := g.offerPull(s, block(2), g.others()); err != nil {
				return err
			}
			for _, p := range g.othersInRingOrder() {
				if err := g.pullFrom(p, s, make([]byte, n)); err != nil {
					return err
				}
			}
			return nil
		}, nil)
		if err != nil {
			t.Errorf("rank 2: %v", err)
			return
		}
		w.Wait(0)
	}, func(t *testing.T, g *Group) {
		out := filled(-1, 4*n/4)
		w, err := g.AllGather(block(g.Rank()), out)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Wait(0); err != nil {
			t.Fatalf("rank %d: all_gather raised: %v", g.Rank(), err)
		}
		if !w.LocalSuccess() || len(w.FailedRanks()) != 0 || !bytes.Equal(out, want) || w.Ran() != 0b1111 {
			t.Errorf("rank %d: all_gather whose blocks every survivor has: local success %v, failed %v, data right %v, ran %04b; want true, [], true, 1111",
				g.Rank(), w.LocalSuccess(), w.FailedRanks(), bytes.Equal(out, want), w.Ran())
		}
		buf := f32bytes(float32(g.Rank() + 1))
		w, err = g.AllReduce(buf, 1, Float32, Sum)
		expectFailedOp(t, g, "all_reduce after the all_gather", w, err, 2, false)
		if !bytes.Equal(buf, f32bytes(1+2+4)) || w.Ran() != 0b1011 {
			t.Errorf("rank %d: all_reduce after the death: %v over %04b, want the survivors' sum 7 over 1011", g.Rank(), buf, w.Ran())
		}
	})
}
