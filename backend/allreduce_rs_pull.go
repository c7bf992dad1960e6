package backend

// allReduceRSPull: reduce-scatter as allReduceRSAG, then each rank reduces
// its slice into one of its pull slots, copies it into its own buffer and
// lends the slot to every peer, which copies the slice straight from there
// (pull.go). The all-gather then costs one copy per receiving rank instead
// of two (one into the peer's slot, one out of it): for n ranks each rank
// copies (n-1)/n + 1/n of the data there instead of 2(n-1)/n.
func allReduceRSPull(g *Group, buf []byte, count int, dt DType, op ReduceOp) error {
	es := dt.Size()
	// Slices are cut among the active ranks: position i of g.act owns slice i.
	n := len(g.act)
	per := n * (g.SlotBytes() / es)
	others := g.others()
	msgs := make([]out, 0, len(others))
	srcs := make([][]byte, n)
	for k, lo := 0, 0; lo < count; k, lo = k+1, lo+per {
		c := min(per, count-lo)
		slice := func(r int) []byte {
			q, rem := c/n, c%n
			a := lo + r*q + min(r, rem)
			b := lo + (r+1)*q + min(r+1, rem)
			return buf[a*es : b*es]
		}
		msgs = msgs[:0]
		for i, p := range g.act {
			if p != g.rank {
				msgs = append(msgs, out{peer: p, data: slice(i)})
			}
		}
		if err := g.send(chColl, msgs); err != nil {
			return err
		}
		mine := slice(g.pos)
		for i, p := range g.act {
			if p == g.rank {
				srcs[i] = mine
				continue
			}
			s, err := g.recv(chColl, p)
			if err != nil {
				return err
			}
			srcs[i] = s[:len(mine)]
		}
		s := g.pullSlot(k)
		ps, err := g.claimPull(s)
		if err != nil {
			return err
		}
		err = Reduce(ps[:len(mine)], srcs, dt, op, len(mine)/es)
		g.release(chColl, others...)
		if err != nil {
			return err
		}
		if err := g.lendPull(s, others); err != nil {
			return err
		}
		g.dirty = true
		copy(mine, ps[:len(mine)])
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
	return nil
}
