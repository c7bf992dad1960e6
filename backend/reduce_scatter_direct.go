package backend

// reduceScatterDirect: every active rank writes block p of its input
// (chunk by chunk) into active rank p's slot; each reduces the blocks it
// receives in rank order into out. Blocks of inactive slots are not read.
func reduceScatterDirect(g *Group, in, outBuf []byte, count int, dt DType, op ReduceOp) error {
	es := dt.Size()
	per := g.stepBytes() / es
	others := g.others()
	var mb [smallGroup]out
	msgs := room(mb[:], len(others))[:0]
	var sb [smallGroup][]byte
	srcs := room(sb[:], len(g.act)) // srcs[i]: active position i's block
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
		for i, p := range g.act {
			if p == g.rank {
				srcs[i] = block(p)
				continue
			}
			s, err := g.recv(chColl, p)
			if err != nil {
				return err
			}
			srcs[i] = s[:c*es]
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
