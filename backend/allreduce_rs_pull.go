package backend

// allReduceRSPull: reduce-scatter as allReduceRSAG, then each rank reduces
// its slice into its own buffer and one of its pull slots at once
// (reduceAlso: one pass where the kernel is fused) and lends the slot to
// every peer, which copies the slice straight from there (pull.go). The
// all-gather then costs one copy per receiving rank instead of two (one
// into the peer's slot, one out of it): for n ranks each rank copies
// (n-1)/n of the data there instead of 2(n-1)/n. The op ends once every
// peer has read this rank's slices.
func allReduceRSPull(g *Group, buf []byte, count int, dt DType, op ReduceOp) error {
	es := dt.Size()
	// Slices are cut among the active ranks: position i of g.act owns slice i.
	n := len(g.act)
	per := n * (g.stepBytes() / es)
	others := g.others()
	msgs := make([]out, 0, len(others))
	srcs := make([][]byte, n)
	rounds := 0
	for k, lo := 0, 0; lo < count; k, lo = k+1, lo+per {
		rounds++
		slice := chunkSlices(buf, es, lo, min(per, count-lo), n)
		mine, err := scatterChunk(g, slice, msgs, srcs)
		if err != nil {
			return err
		}
		s := g.pullSlot(k)
		ps, err := g.claimPull(s)
		if err != nil {
			return err
		}
		g.dirty = true
		err = reduceAlso(mine, ps[:len(mine)], srcs, dt, op, len(mine)/es)
		g.release(chColl, others...)
		if err != nil {
			return err
		}
		if err := g.lendPull(s, others); err != nil {
			return err
		}
		for i, p := range g.act {
			if p == g.rank {
				continue
			}
			if err := g.pullFrom(p, s, slice(i)); err != nil {
				return err
			}
		}
		g.release(chColl, others...)
	}
	return g.awaitPullReaders(rounds)
}
