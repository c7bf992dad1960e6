package backend

// scatterFromRoot: the root writes each chunk of block p of its input into
// active rank p's slot; every active rank copies its block to out. Blocks
// of inactive slots are not read.
func scatterFromRoot(g *Group, in, outBuf []byte, root int) error {
	nb := len(outBuf)
	slot := g.SlotBytes()
	others := g.others()
	if g.rank == root {
		copy(outBuf, in[root*nb:(root+1)*nb])
	}
	var mb [smallGroup]out
	msgs := room(mb[:], len(others))[:0]
	for off := 0; off < nb; off += slot {
		end := min(off+slot, nb)
		if g.rank == root {
			msgs = msgs[:0]
			for _, p := range others {
				msgs = append(msgs, out{peer: p, data: in[p*nb+off : p*nb+end]})
			}
			if err := g.send(chColl, msgs); err != nil {
				return err
			}
			continue
		}
		s, err := g.recv(chColl, root)
		if err != nil {
			return err
		}
		copy(outBuf[off:end], s)
		g.release(chColl, root)
	}
	return nil
}
