package backend

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// The ops with one block per rank, after a rank died: buffers have
// WorldSize blocks (highest active slot + 1), indexed by slot; only the
// active ranks' blocks move, reductions run over the active ranks in
// ascending order, and an inactive slot's output block keeps its contents.

// A hole in the middle: rank 2 of 4 gone, active {0, 1, 3}, world size 4.
func TestHoleInTheMiddle(t *testing.T) { holeScenario(t, 2) }

// The highest slot gone: rank 3 of 4, active {0, 1, 2}, world size 3.
func TestHighestSlotGone(t *testing.T) { holeScenario(t, 3) }

// sentinel is n filler bytes: an output block that still holds them was
// left untouched (the tests' data is random, so a written non-empty block
// does not match).
func sentinel(n int) []byte { return bytes.Repeat([]byte{0xA5}, n) }

// holeScenario lets rank `dead` of 4 die; the survivors notice it at a
// barrier, then run every op with one block per rank over the hole.
func holeScenario(t *testing.T, dead int) {
	const n = 4
	deathScenario(t, n, dead, testSlot, func(g *Group) {}, func(t *testing.T, g *Group) {
		w, err := g.Barrier()
		expectFailedOp(t, g, "barrier meeting the death", w, err, dead, true)
		var act []int
		for r := range n {
			if r != dead {
				act = append(act, r)
			}
		}
		ws := act[len(act)-1] + 1
		if v := g.View(); v.Active[dead] || g.WorldSize() != ws {
			t.Fatalf("rank %d: view %+v, world size %d; want rank %d inactive, world size %d", g.Rank(), v, g.WorldSize(), dead, ws)
		}
		h := holes{t: t, g: g, me: g.Rank(), dead: dead, act: act, ws: ws}
		h.allGather()
		h.reduceScatter()
		h.allToAll()
		h.reduce()
		h.gatherScatter()
		// The refused requests left the group usable.
		w, err = g.Barrier()
		must(t, g, "barrier after the hole ops", w, err)
		if !w.LocalSuccess() {
			t.Errorf("rank %d: barrier after the hole ops reported a failure", g.Rank())
		}
	})
}

type holes struct {
	t        *testing.T
	g        *Group
	me, dead int
	act      []int // active ranks, ascending
	ws       int   // world size
}

func (h holes) active(r int) bool { return slices.Contains(h.act, r) }

// invalid checks that a request is refused before it is queued.
func (h holes) invalid(what string, w *Work, err error) {
	h.t.Helper()
	if !errors.Is(err, ErrInvalid) || w != nil {
		h.t.Errorf("rank %d: %s: got %v, want ErrInvalid", h.me, what, err)
	}
}

// inactive checks that an op completed with ErrInactive (an inactive root).
func (h holes) inactive(what string, w *Work, err error) {
	h.t.Helper()
	if err != nil {
		h.t.Errorf("rank %d: %s: %v", h.me, what, err)
		return
	}
	if _, err := w.Wait(0); !errors.Is(err, ErrInactive) {
		h.t.Errorf("rank %d: %s: got %v, want ErrInactive", h.me, what, err)
	}
}

// checkBlocks compares the WorldSize blocks of out (nb bytes each) with
// want(r) for active slots and with the sentinel for inactive ones; out
// has one more block, past the world size, which must be untouched too.
func (h holes) checkBlocks(what string, out []byte, nb int, want func(r int) []byte) {
	h.t.Helper()
	if !bytes.Equal(out[h.ws*nb:], sentinel(nb)) {
		h.t.Errorf("rank %d: %s: the block past the world size was written", h.me, what)
	}
	for r := range h.ws {
		got := out[r*nb : (r+1)*nb]
		if h.active(r) && !bytes.Equal(got, want(r)) {
			h.t.Errorf("rank %d: %s: block %d wrong", h.me, what, r)
		}
		if !h.active(r) && !bytes.Equal(got, sentinel(nb)) {
			h.t.Errorf("rank %d: %s: block %d of an inactive slot was written", h.me, what, r)
		}
	}
}

func (h holes) allGather() {
	for seed, nb := range []int{0, 5, 3*testSlot + 7} {
		out := sentinel((h.ws + 1) * nb)
		w, err := h.g.AllGather(bytesOf(h.me, nb, seed), out)
		must(h.t, h.g, "all_gather", w, err)
		h.checkBlocks(fmt.Sprintf("all_gather %d bytes", nb), out, nb, func(r int) []byte { return bytesOf(r, nb, seed) })
	}
	w, err := h.g.AllGather(make([]byte, 8), make([]byte, 8*h.ws-1))
	h.invalid("all_gather into less than world size blocks", w, err)
}

func (h holes) reduceScatter() {
	seed := 2000
	for _, dt := range []DType{Float32, Int64} {
		for _, op := range []ReduceOp{Sum, Avg, Max} {
			for _, count := range []int{0, 3, 2*testSlot/dt.Size() + 5} {
				seed++
				es := dt.Size()
				// Rank r's input: WorldSize blocks of count elements; the
				// inactive slot's block holds data too, and must not count.
				ins := make(map[int][]byte)
				var mine [][]byte // block me of every active rank, ascending
				for _, r := range h.act {
					ins[r] = input(dt, r, h.ws*count, seed)
					mine = append(mine, ins[r][h.me*count*es:(h.me+1)*count*es])
				}
				want := refReduce(dt, op, mine, count)
				out := make([]byte, count*es)
				w, err := h.g.ReduceScatter(ins[h.me], out, count, dt, op)
				must(h.t, h.g, "reduce_scatter", w, err)
				if !bytes.Equal(out, want) {
					h.t.Errorf("rank %d: reduce_scatter %v %v count %d wrong", h.me, dt, op, count)
				}
			}
		}
	}
	w, err := h.g.ReduceScatter(make([]byte, 4*(2*h.ws-1)), make([]byte, 8), 2, Float32, Sum)
	h.invalid("reduce_scatter from less than world size blocks", w, err)
}

func (h holes) allToAll() {
	for _, scale := range []int{1, 1000, testSlot + 3} {
		// Block sizes per slot; blocks to and from the inactive slot are
		// non-empty, so skipping them is visible.
		size := func(s, d int) int {
			if !h.active(s) || !h.active(d) {
				return scale + 1
			}
			return a2aSize(s, d, scale)
		}
		send, recv := make([]int, h.ws), make([]int, h.ws)
		var in []byte
		for d := range h.ws {
			send[d], recv[d] = size(h.me, d), size(d, h.me)
			in = append(in, bytesOf(h.me*100+d, send[d], scale)...)
		}
		tot := 0
		for _, v := range recv {
			tot += v
		}
		out := sentinel(tot)
		w, err := h.g.AllToAll(in, out, send, recv)
		must(h.t, h.g, "all_to_all", w, err)
		at := 0
		for s := range h.ws {
			got := out[at : at+recv[s]]
			if h.active(s) && !bytes.Equal(got, bytesOf(s*100+h.me, recv[s], scale)) {
				h.t.Errorf("rank %d: all_to_all block from %d wrong (scale %d)", h.me, s, scale)
			}
			if !h.active(s) && !bytes.Equal(got, sentinel(recv[s])) {
				h.t.Errorf("rank %d: all_to_all block from inactive %d written (scale %d)", h.me, s, scale)
			}
			at += recv[s]
		}
	}
	w, err := h.g.AllToAll(nil, nil, make([]int, h.ws-1), make([]int, h.ws-1))
	h.invalid("all_to_all with fewer sizes than the world size", w, err)
	w, err = h.g.AllToAll(nil, nil, make([]int, h.ws+1), make([]int, h.ws+1))
	h.invalid("all_to_all with more sizes than the world size", w, err)
}

func (h holes) reduce() {
	seed := 3000
	for _, dt := range []DType{Float32, BFloat16, Int64} {
		for _, op := range []ReduceOp{Sum, Avg, Max} {
			if CheckReduction(dt, op) != nil {
				continue
			}
			for _, count := range []int{1, 2*testSlot/dt.Size() + 3} {
				seed++
				var ins [][]byte // active ranks' inputs, ascending
				for _, r := range h.act {
					ins = append(ins, input(dt, r, count, seed))
				}
				want := refReduce(dt, op, ins, count)
				own := ins[slices.Index(h.act, h.me)]
				for _, root := range h.act {
					buf := slices.Clone(own)
					w, err := h.g.Reduce(buf, count, dt, op, root)
					must(h.t, h.g, "reduce", w, err)
					if h.me == root && !bytes.Equal(buf, want) {
						h.t.Errorf("rank %d: reduce %v %v count %d to %d wrong", h.me, dt, op, count, root)
					}
					if h.me != root && !bytes.Equal(buf, own) {
						h.t.Errorf("rank %d: reduce to %d changed a non-root buffer", h.me, root)
					}
				}
			}
		}
	}
	buf := f32bytes(float32(h.me))
	w, err := h.g.Reduce(buf, 1, Float32, Sum, h.dead)
	h.inactive("reduce to the inactive rank", w, err)
	if !bytes.Equal(buf, f32bytes(float32(h.me))) {
		h.t.Errorf("rank %d: reduce to the inactive rank changed the buffer", h.me)
	}
	w, err = h.g.Reduce(buf, 1, Float32, Sum, 4)
	h.invalid("reduce to a rank beyond the group's slots", w, err)
}

func (h holes) gatherScatter() {
	for seed, nb := range []int{0, 9, 2*testSlot + 1} {
		for _, root := range h.act {
			var gout []byte
			if h.me == root {
				gout = sentinel((h.ws + 1) * nb)
			}
			w, err := h.g.Gather(bytesOf(h.me, nb, seed), gout, root)
			must(h.t, h.g, "gather", w, err)
			if h.me == root {
				h.checkBlocks(fmt.Sprintf("gather %d bytes to %d", nb, root), gout, nb, func(r int) []byte { return bytesOf(r, nb, seed) })
			}
			var sin []byte
			if h.me == root {
				sin = bytesOf(root, h.ws*nb, seed+50)
			}
			sout := make([]byte, nb)
			w, err = h.g.Scatter(sin, sout, root)
			must(h.t, h.g, "scatter", w, err)
			if !bytes.Equal(sout, bytesOf(root, h.ws*nb, seed+50)[h.me*nb:(h.me+1)*nb]) {
				h.t.Errorf("rank %d: scatter %d bytes from %d wrong", h.me, nb, root)
			}
		}
	}
	out := sentinel(8)
	w, err := h.g.Gather(make([]byte, 8), nil, h.dead)
	h.inactive("gather to the inactive rank", w, err)
	w, err = h.g.Scatter(nil, out, h.dead)
	h.inactive("scatter from the inactive rank", w, err)
	if !bytes.Equal(out, sentinel(8)) {
		h.t.Errorf("rank %d: scatter from the inactive rank wrote the output", h.me)
	}
	if root := h.act[0]; h.me == root {
		w, err = h.g.Gather(make([]byte, 8), make([]byte, 8*h.ws-1), root)
		h.invalid("gather into less than world size blocks", w, err)
		w, err = h.g.Scatter(make([]byte, 8*h.ws-1), make([]byte, 8), root)
		h.invalid("scatter from less than world size blocks", w, err)
	}
}
