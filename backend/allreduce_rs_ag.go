package backend

// allReduceRSAG: reduce-scatter then all-gather, chunk by chunk. A chunk of
// up to size*stepBytes bytes is cut into size slices; rank r receives slice r
// from every peer, reduces it in rank order (in place in its own buffer),
// and sends the result to every peer. Each rank moves 2(n-1)/n of the data
// and reduces 1/n of it.
func allReduceRSAG(g *Group, buf []byte, count int, dt DType, op ReduceOp) error {
	es := dt.Size()
	// Slices are cut among the active ranks: position i of g.act owns slice i.
	n := len(g.act)
	per := n * (g.stepBytes() / es)
	others := g.others()
	msgs := make([]out, 0, len(others))
	srcs := make([][]byte, n)
	for lo := 0; lo < count; lo += per {
		slice := chunkSlices(buf, es, lo, min(per, count-lo), n)
		mine, err := scatterChunk(g, slice, msgs, srcs)
		if err != nil {
			return err
		}
		g.dirty = true
		err = Reduce(mine, srcs, dt, op, len(mine)/es)
		g.release(chColl, others...)
		if err != nil {
			return err
		}
		// all-gather
		msgs = msgs[:0]
		for _, p := range others {
			msgs = append(msgs, out{peer: p, data: mine})
		}
		if err := g.send(chColl, msgs); err != nil {
			return err
		}
		for i, p := range g.act {
			if p == g.rank {
				continue
			}
			s, err := g.recv(chColl, p)
			if err != nil {
				return err
			}
			dst := slice(i)
			copy(dst, s[:len(dst)])
		}
		g.release(chColl, others...)
	}
	return nil
}

// chunkSlices cuts the chunk of c elements at element lo of buf into n
// slices, one per active position, as evenly as possible.
func chunkSlices(buf []byte, es, lo, c, n int) func(r int) []byte {
	return func(r int) []byte {
		q, rem := c/n, c%n
		a := lo + r*q + min(r, rem)
		b := lo + (r+1)*q + min(r+1, rem)
		return buf[a*es : b*es]
	}
}

// scatterChunk is the reduce-scatter exchange of one chunk: it sends every
// peer its slice and receives this rank's slice from every peer, so that
// srcs[i] holds active position i's copy (this rank's own at g.pos). It
// returns this rank's slice; the caller reduces srcs and then releases the
// collective channel, since the received slices live in the peers' slots.
func scatterChunk(g *Group, slice func(int) []byte, msgs []out, srcs [][]byte) ([]byte, error) {
	msgs = msgs[:0]
	for i, p := range g.act {
		if p != g.rank {
			msgs = append(msgs, out{peer: p, data: slice(i)})
		}
	}
	if err := g.send(chColl, msgs); err != nil {
		return nil, err
	}
	mine := slice(g.pos)
	for i, p := range g.act {
		if p == g.rank {
			srcs[i] = mine
			continue
		}
		s, err := g.recv(chColl, p)
		if err != nil {
			return nil, err
		}
		srcs[i] = s[:len(mine)]
	}
	return mine, nil
}
