package backend

import (
	"bytes"
	"testing"
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
