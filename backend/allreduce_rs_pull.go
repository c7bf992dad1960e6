package backend

// allReduceRSPull: reduce-scatter as allReduceRSAG, then each rank reduces
// its slice into one of its pull slots, copies it into its own buffer and
// lends the slot to every peer, which copies the slice straight from there
// (pull.go). The all-gather then costs one copy per receiving rank instead
// of two (one into the peer's slot, one out of it): for n ranks each rank
// copies (n-1)/n + 1/n of the data there instead of 2(n-1)/n.
func allReduceRSPull(g *Group, buf []byte, count int, dt DType, op ReduceOp) error {
	es := dt.Size()
	n := g.size
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
		for _, p := range others {
			msgs = append(msgs, out{peer: p, data: slice(p)})
		}
		if err := g.send(chColl, msgs); err != nil {
			return err
		}
		mine := slice(g.rank)
		srcs[g.rank] = mine
		for _, p := range others {
			s, err := g.recv(chColl, p)
			if err != nil {
				return err
			}
			srcs[p] = s[:len(mine)]
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
		copy(mine, ps[:len(mine)])
		for _, p := range others {
			if err := g.pullFrom(p, s, slice(p)); err != nil {
				return err
			}
		}
		g.release(chColl, others...)
	}
	return nil
}
