package backend

// broadcastOneToAll: the root writes each chunk (stepBytes) into every
// peer's slot; with two slots per peer it runs one chunk ahead of the
// receivers' copy-out.
func broadcastOneToAll(g *Group, buf []byte, root int) error {
	step := g.stepBytes()
	others := g.others()
	var mb [smallGroup]out
	msgs := room(mb[:], len(others))[:0]
	for off := 0; off < len(buf); off += step {
		c := buf[off:min(off+step, len(buf))]
		if g.rank == root {
			msgs = msgs[:0]
			for _, p := range others {
				msgs = append(msgs, out{peer: p, data: c})
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
		copy(c, s)
		g.release(chColl, root)
	}
	return nil
}
