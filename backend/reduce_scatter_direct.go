package backend

// reduceScatterDirect: every rank writes block p of its input (chunk by
// chunk) into rank p's slot; each rank reduces the blocks it receives in
// rank order into out.
func reduceScatterDirect(g *Group, in, outBuf []byte, count int, dt DType, op ReduceOp) error {
	es := dt.Size()
	per := g.SlotBytes() / es
	others := g.others()
	msgs := make([]out, 0, len(others))
	srcs := make([][]byte, g.size)
	for lo := 0; lo < count; lo += per {
		c := min(per, count-lo)
		block := func(r int) []byte { return in[(r*count+lo)*es : (r*count+lo+c)*es] }
		msgs = msgs[:0]
		for _, p := range others {
			msgs = append(msgs, out{peer: p, data: block(p)})
		}
		if err := g.send(chColl, msgs); err != nil {
			return err
		}
		srcs[g.rank] = block(g.rank)
		for _, p := range others {
			s, err := g.recv(chColl, p)
			if err != nil {
				return err
			}
			srcs[p] = s[:c*es]
		}
		// out may be the input's own block (in place); Reduce allows that.
		err := Reduce(outBuf[lo*es:(lo+c)*es], srcs, dt, op, c)
		g.release(chColl, others...)
		if err != nil {
			return err
		}
	}
	return nil
}
