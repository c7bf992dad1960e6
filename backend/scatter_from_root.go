package backend

// scatterFromRoot: the root writes each chunk of block p of its input into
// active rank p's slot; every active rank copies its block to out. Blocks
// of inactive slots are not read.
//
// One outcome (issue 46): no survivor can hand a receiver the block the
// root meant for it alone, so a receiver must not complete while another
// may lack its block. The root ends with a commit, a message without data
// that it writes to every receiver once its every block has landed; a
// receiver completes on it. A receiver whose wait for the commit fails has
// its block (the op is done here: tail): the reconciliation completes it
// when some survivor took the commit or every survivor is done, and fails
// it with the others when one lacks its block (membership.go,
// completedRanks). It costs one flag write per receiver.
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
	if g.rank == root {
		msgs = msgs[:0]
		for _, p := range others {
			msgs = append(msgs, out{peer: p})
		}
		return g.send(chColl, msgs)
	}
	if _, err := g.recv(chColl, root); err != nil {
		return tail(err)
	}
	g.release(chColl, root)
	return nil
}
