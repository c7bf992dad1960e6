package backend

// reduceToRoot: every rank writes each chunk into the root's slot; the root
// reduces them in rank order into its buffer.
func reduceToRoot(g *Group, buf []byte, count int, dt DType, op ReduceOp, root int) error {
	es := dt.Size()
	per := g.SlotBytes() / es
	others := g.others()
	srcs := make([][]byte, g.size)
	for lo := 0; lo < count; lo += per {
		c := min(per, count-lo)
		chunk := buf[lo*es : (lo+c)*es]
		if g.rank != root {
			if err := g.send(chColl, []out{{peer: root, data: chunk}}); err != nil {
				return err
			}
			continue
		}
		srcs[g.rank] = chunk
		for _, p := range others {
			s, err := g.recv(chColl, p)
			if err != nil {
				return err
			}
			srcs[p] = s[:len(chunk)]
		}
		g.dirty = true
		err := Reduce(chunk, srcs, dt, op, c)
		g.release(chColl, others...)
		if err != nil {
			return err
		}
	}
	return nil
}
