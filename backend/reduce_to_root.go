package backend

// reduceToRoot: every active rank writes each chunk into the root's slot;
// the root reduces them in rank order into its buffer. A non-root ends by
// waiting for the root to have reduced its last chunk (awaitRoot).
func reduceToRoot(g *Group, buf []byte, count int, dt DType, op ReduceOp, root int) error {
	es := dt.Size()
	per := g.SlotBytes() / es
	others := g.others()
	var sb [smallGroup][]byte
	srcs := room(sb[:], len(g.act)) // srcs[i]: active position i's chunk
	for lo := 0; lo < count; lo += per {
		c := min(per, count-lo)
		chunk := buf[lo*es : (lo+c)*es]
		if g.rank != root {
			if err := g.send(chColl, []out{{peer: root, data: chunk}}); err != nil {
				return err
			}
			continue
		}
		for i, p := range g.act {
			if p == g.rank {
				srcs[i] = chunk
				continue
			}
			s, err := g.recv(chColl, p)
			if err != nil {
				return err
			}
			srcs[i] = s[:len(chunk)]
		}
		g.dirty = true
		err := Reduce(chunk, srcs, dt, op, c)
		g.release(chColl, others...)
		if err != nil {
			return err
		}
	}
	return g.awaitRoot(root)
}
