package backend

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

// TestReductionAlgorithmsAllRankCounts runs every all_reduce algorithm
// (forced, as MC_PG_ALLREDUCE_ALGO does, and the size-based choice) and
// reduce_scatter on 2 to 8 ranks against the scalar reference: floats with
// NaNs, odd counts, counts that cross chunk boundaries, buffers that start
// one element past an allocation (unaligned for the vector kernels), and
// reduce_scatter both into a separate output and in place into the
// input's own block.
func TestReductionAlgorithmsAllRankCounts(t *testing.T) {
	defer func(f string) { forcedAllReduce = f }(forcedAllReduce)
	for _, n := range []int{2, 3, 5, 8} {
		for _, algo := range []string{"", "direct", "directpull", "rsag", "rspull"} {
			forcedAllReduce = algo
			t.Run(fmt.Sprintf("ranks=%d/algo=%q", n, algo), func(t *testing.T) {
				ranks(t, n, testSlot, func(t *testing.T, g *Group) { checkReductions(t, g, n, algo == "") })
			})
		}
	}
}

// checkReductions runs the all_reduce cases, and the reduce_scatter ones
// when withRS (they do not depend on the all_reduce algorithm).
func checkReductions(t *testing.T, g *Group, n int, withRS bool) {
	me, seed := g.Rank(), uint64(0)
	for _, dt := range []DType{Float32, Float64, BFloat16, Int32} {
		es := dt.Size()
		for _, op := range []ReduceOp{Sum, Avg, Min, Max} {
			for _, count := range []int{1, 37, 3*testSlot/es + 5} {
				seed++
				ins := make([][]byte, n)
				for r := range n {
					ins[r] = randomElems(rand.New(rand.NewPCG(seed, uint64(r))), dt, n*count, true)
				}
				unaligned := func(b []byte) []byte { return append(make([]byte, es, es+len(b)), b...)[es:] }
				what := fmt.Sprintf("%v %v count %d", dt, op, count)

				heads := make([][]byte, n)
				for r := range n {
					heads[r] = ins[r][:count*es]
				}
				want := refReduce(dt, op, heads, count)
				buf := unaligned(heads[me])
				w, err := g.AllReduce(buf, count, dt, op)
				must(t, g, "all_reduce "+what, w, err)
				checkPullsAcknowledged(t, g, "all_reduce "+what)
				if !bytes.Equal(buf, want) && !equalNaN(dt, buf, want) {
					t.Errorf("rank %d: all_reduce %s wrong", me, what)
				}

				if !withRS {
					continue
				}
				blocks := make([][]byte, n)
				for r := range n {
					blocks[r] = ins[r][me*count*es : (me+1)*count*es]
				}
				wantRS := refReduce(dt, op, blocks, count)
				in := unaligned(ins[me])
				outb := unaligned(make([]byte, count*es))
				w, err = g.ReduceScatter(in, outb, count, dt, op)
				must(t, g, "reduce_scatter "+what, w, err)
				if !bytes.Equal(outb, wantRS) && !equalNaN(dt, outb, wantRS) {
					t.Errorf("rank %d: reduce_scatter %s wrong", me, what)
				}
				own := in[me*count*es : (me+1)*count*es]
				w, err = g.ReduceScatter(in, own, count, dt, op)
				must(t, g, "reduce_scatter in place "+what, w, err)
				if !bytes.Equal(own, wantRS) && !equalNaN(dt, own, wantRS) {
					t.Errorf("rank %d: reduce_scatter in place %s wrong", me, what)
				}
			}
		}
	}
}

// Over TCP the pull algorithms read the peers' slots with Transfer Engine
// READs into the stage slots instead of through direct views.
func TestPullAllReducesOverTCP(t *testing.T) {
	t.Setenv("MC_FORCE_TCP", "true")
	defer func(f string) { forcedAllReduce = f }(forcedAllReduce)
	for _, algo := range []string{"directpull", "rspull"} {
		forcedAllReduce = algo
		t.Run(algo, func(t *testing.T) {
			ranks(t, 3, testSlot, func(t *testing.T, g *Group) { checkReductions(t, g, 3, false) })
		})
	}
}

// checkPullsAcknowledged fails unless every peer has acknowledged every
// pull slot this rank lent it: an op that lends its memory must not end
// before its readers are done with it (the rank could exit next).
func checkPullsAcknowledged(t *testing.T, g *Group, what string) {
	t.Helper()
	for s := range nSlots {
		for p, seq := range g.pullLent[s] {
			if acked := atomic.LoadUint64(g.word(g.lay.flag(fAck, chColl, p))); acked < seq {
				t.Errorf("rank %d: %s ended with pull slot %d lent to rank %d unread (ack %d of %d)", g.Rank(), what, s, p, acked, seq)
			}
		}
	}
}
