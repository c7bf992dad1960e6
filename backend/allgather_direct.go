package backend

// allGatherDirect: every active rank writes each chunk (stepBytes) of its
// input into every active peer's slot, and copies what it receives to its
// place (by slot) in out; blocks of inactive slots are left as they were.
func allGatherDirect(g *Group, in, outBuf []byte) error {
	nb := len(in)
	step := g.stepBytes()
	others := g.others()
	var mb [smallGroup]out
	msgs := room(mb[:], len(others))[:0]
	for off := 0; off < nb; off += step {
		c := in[off:min(off+step, nb)]
		msgs = msgs[:0]
		for _, p := range others {
			msgs = append(msgs, out{peer: p, data: c})
		}
		if err := g.send(chColl, msgs); err != nil {
			return err
		}
		// This rank's own block, while the peers copy out the chunk.
		copy(outBuf[g.rank*nb+off:], c)
		for _, p := range others {
			s, err := g.recv(chColl, p)
			if err != nil {
				return err
			}
			copy(outBuf[p*nb+off:], s[:len(c)])
		}
		g.release(chColl, others...)
	}
	return nil
}
