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
// reduce_scatter on 1 to 8 ranks against the scalar reference, for every
// dtype and reduce op: floats with NaNs, odd counts, counts that cross
// chunk boundaries, buffers that start one element past an allocation
// (unaligned for the vector kernels), and reduce_scatter both into a
// separate output and in place into the input's own block.
func TestReductionAlgorithmsAllRankCounts(t *testing.T) {
	defer func(f string) { forcedAllReduce = f }(forcedAllReduce)
	for n := 1; n <= 8; n++ {
		for ai, algo := range []string{"", "direct", "directpull", "rsag", "rspull"} {
			if n == 1 && algo != "" {
				continue // one rank reduces locally whatever is forced
			}
			forcedAllReduce = algo
			cases := reductionCases(n, n+ai)
			t.Run(fmt.Sprintf("ranks=%d/algo=%q", n, algo), func(t *testing.T) {
				ranks(t, n, testSlot, func(t *testing.T, g *Group) { checkReductions(t, g, cases, algo == "") })
			})
		}
	}
}

// reductionCase is one reduction of n ranks' inputs with its results,
// computed once for all the ranks (they only read it).
type reductionCase struct {
	dt     DType
	op     ReduceOp
	count  int
	ins    [][]byte // rank r's input: n blocks of count elements
	want   []byte   // all_reduce of the inputs' first blocks
	wantRS [][]byte // rank r's reduce_scatter result
}

// reductionCases gives every dtype every op it supports (the others are
// refused up front: TestCheckReduction), each pair with one of the counts
// (one element, an odd count within a chunk, one that crosses chunks), the
// choice turning with rotate so that the callers' loops give each pair
// every count. Float inputs carry NaNs.
func reductionCases(n, rotate int) []reductionCase {
	var cases []reductionCase
	seed := uint64(0)
	for _, dt := range allDTypes {
		es := dt.Size()
		for _, op := range allOps {
			if CheckReduction(dt, op) != nil {
				continue
			}
			counts := []int{1, 37, 3*testSlot/es + 5}
			c := reductionCase{dt: dt, op: op, count: counts[(int(seed)+rotate)%len(counts)]}
			seed++
			nb := c.count * es
			for r := range n {
				c.ins = append(c.ins, randomElems(rand.New(rand.NewPCG(seed, uint64(r))), dt, n*c.count, true))
			}
			block := func(b int) [][]byte {
				bs := make([][]byte, n)
				for r := range n {
					bs[r] = c.ins[r][b*nb : (b+1)*nb]
				}
				return bs
			}
			c.want = refReduce(dt, op, block(0), c.count)
			for r := range n {
				c.wantRS = append(c.wantRS, refReduce(dt, op, block(r), c.count))
			}
			cases = append(cases, c)
		}
	}
	return cases
}

// checkReductions runs the all_reduce cases, and the reduce_scatter ones
// when withRS (they do not depend on the all_reduce algorithm), on
// buffers that start one element past an allocation (unaligned for the
// vector kernels); reduce_scatter both into a separate output and in
// place into the input's own block.
func checkReductions(t *testing.T, g *Group, cases []reductionCase, withRS bool) {
	me := g.Rank()
	for _, c := range cases {
		dt, op, count, es := c.dt, c.op, c.count, c.dt.Size()
		unaligned := func(b []byte) []byte { return append(make([]byte, es, es+len(b)), b...)[es:] }
		what := fmt.Sprintf("%v %v count %d", dt, op, count)

		buf := unaligned(c.ins[me][:count*es])
		w, err := g.AllReduce(buf, count, dt, op)
		must(t, g, "all_reduce "+what, w, err)
		checkPullsAcknowledged(t, g, "all_reduce "+what)
		if !bytes.Equal(buf, c.want) && !equalNaN(dt, buf, c.want) {
			t.Errorf("rank %d: all_reduce %s wrong", me, what)
		}

		if !withRS {
			continue
		}
		wantRS := c.wantRS[me]
		in := unaligned(c.ins[me])
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

// Over TCP the pull algorithms read the peers' slots with Transfer Engine
// READs into the stage slots instead of through direct views.
func TestPullAllReducesOverTCP(t *testing.T) {
	t.Setenv("MC_FORCE_TCP", "true")
	defer func(f string) { forcedAllReduce = f }(forcedAllReduce)
	cases := reductionCases(3, 0)
	for _, algo := range []string{"directpull", "rspull"} {
		forcedAllReduce = algo
		t.Run(algo, func(t *testing.T) {
			ranks(t, 3, testSlot, func(t *testing.T, g *Group) { checkReductions(t, g, cases, false) })
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
