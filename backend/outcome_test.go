package backend

import (
	"bytes"
	"fmt"
	"sync"
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

// The same in a pulled all_gather: rank 2 lends its block, reads every
// peer's but acknowledges none, and waits until every survivor has read
// its own block before it goes; so every survivor has every block and
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
			// Its own block read by every survivor before it goes (else
			// a slow survivor lacks it, and all fail the op alike).
			return g.awaitPullReaders(1)
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

// One outcome when a non-root rank of a gather or reduce dies before it
// sent its part: the root cannot complete the op, so the other non-roots,
// which sent theirs, must not report it a success either (before: they
// returned success while the root failed it, and the realignment of
// survivors one collective apart failed only the root's). And when the
// root is the rank that dies, every non-root ends the op alike.
func TestNonRootDeathInAGatherLeavesOneOutcome(t *testing.T) {
	rootedDeath(t, "gather", 0, func(g *Group, root int) (*Work, error) {
		return g.Gather(f32bytes(float32(g.Rank()+1)), make([]byte, 4*4), root)
	})
}

// The same for a reduce.
func TestNonRootDeathInAReduceLeavesOneOutcome(t *testing.T) {
	rootedDeath(t, "reduce", 0, func(g *Group, root int) (*Work, error) {
		return g.Reduce(f32bytes(float32(g.Rank()+1)), 1, Float32, Sum, root)
	})
}

func TestRootDeathInAGatherLeavesOneOutcome(t *testing.T) {
	rootedDeath(t, "gather", 2, func(g *Group, root int) (*Work, error) {
		return g.Gather(f32bytes(float32(g.Rank()+1)), make([]byte, 4*4), root)
	})
}

func TestRootDeathInAReduceLeavesOneOutcome(t *testing.T) {
	rootedDeath(t, "reduce", 2, func(g *Group, root int) (*Work, error) {
		return g.Reduce(f32bytes(float32(g.Rank()+1)), 1, Float32, Sum, root)
	})
}

// rootedDeath runs op, rooted at root, on 4 in-process ranks of which
// rank 2 is gone before it starts; every survivor must end the op alike,
// and when rank 2 was not the root (the root lacks its part): local
// success false, rank 2 in the hint.
func rootedDeath(t *testing.T, what string, root int, op func(g *Group, root int) (*Work, error)) {
	var mu sync.Mutex
	outcomes := map[string][]int{}
	deathScenario(t, 4, 2, 4096, func(*Group) {}, func(t *testing.T, g *Group) {
		w, err := op(g, root)
		if err != nil {
			t.Fatalf("rank %d: %s: %v", g.Rank(), what, err)
		}
		if _, err := w.Wait(0); err != nil {
			t.Fatalf("rank %d: %s raised: %v", g.Rank(), what, err)
		}
		outcome := fmt.Sprintf("local success %v, failed %v", w.LocalSuccess(), w.FailedRanks())
		mu.Lock()
		outcomes[outcome] = append(outcomes[outcome], g.Rank())
		mu.Unlock()
		if root != 2 && (w.LocalSuccess() || fmt.Sprint(w.FailedRanks()) != "[2]") {
			t.Errorf("rank %d: %s without rank 2's part: %s; want local success false, failed [2]", g.Rank(), what, outcome)
		}
	})
	if len(outcomes) != 1 {
		t.Errorf("%s rooted at %d with rank 2 gone: the survivors ended it %d ways: %v", what, root, len(outcomes), outcomes)
	}
}

// One outcome when a scatter's root (rank 2) dies between its messages to
// different receivers: push sends what it managed, then rank 2 goes away.
// No survivor can supply the block meant for another, so the receivers
// complete only on the root's final commit (scatter_from_root.go).
func scatterRootDeath(t *testing.T, push func(g *Group, block func(p int) []byte) error, wantSuccess bool) {
	block := func(p int) []byte { return f32bytes(float32(10*p + 1)) }
	var mu sync.Mutex
	outcomes := map[string][]int{}
	deathScenario(t, 4, 2, 4096, func(g *Group) {
		w, err := g.start(g.coll, func() error { return push(g, block) }, nil)
		if err != nil {
			t.Errorf("rank 2: %v", err)
			return
		}
		w.Wait(0)
	}, func(t *testing.T, g *Group) {
		out := filled(-1, 1)
		w, err := g.Scatter(nil, out, 2)
		if err != nil {
			t.Fatalf("rank %d: scatter: %v", g.Rank(), err)
		}
		if _, err := w.Wait(0); err != nil {
			t.Fatalf("rank %d: scatter raised: %v", g.Rank(), err)
		}
		o := fmt.Sprintf("local success %v, failed %v", w.LocalSuccess(), w.FailedRanks())
		mu.Lock()
		outcomes[o] = append(outcomes[o], g.Rank())
		mu.Unlock()
		if wantSuccess && (!w.LocalSuccess() || len(w.FailedRanks()) != 0 || !bytes.Equal(out, block(g.Rank()))) {
			t.Errorf("rank %d: scatter whose blocks every survivor has: %s, block %v; want success, [], %v", g.Rank(), o, out, block(g.Rank()))
		}
		if !wantSuccess && (w.LocalSuccess() || fmt.Sprint(w.FailedRanks()) != "[2]") {
			t.Errorf("rank %d: scatter whose blocks some survivor lacks: %s; want local success false, failed [2]", g.Rank(), o)
		}
	})
	if len(outcomes) != 1 {
		t.Errorf("scatter from rank 2, dead mid-op: the survivors ended it %d ways: %v", len(outcomes), outcomes)
	}
}

// The root gave rank 1 its block only: ranks 0 and 3 lack theirs, so
// rank 1, which has its block but no commit, fails the op with them.
func TestScatterRootDeathBeforeEveryBlockLeavesOneOutcome(t *testing.T) {
	scatterRootDeath(t, func(g *Group, block func(int) []byte) error {
		return g.send(chColl, []out{{peer: 1, data: block(1)}})
	}, false)
}

// Every block landed and only rank 1 took the commit: it completed, and
// ranks 0 and 3, with their blocks, complete the op with it.
func TestScatterRootDeathBeforeEveryCommitLeavesOneOutcome(t *testing.T) {
	scatterRootDeath(t, func(g *Group, block func(int) []byte) error {
		if err := g.send(chColl, []out{{peer: 0, data: block(0)}, {peer: 1, data: block(1)}, {peer: 3, data: block(3)}}); err != nil {
			return err
		}
		return g.send(chColl, []out{{peer: 1}})
	}, true)
}
