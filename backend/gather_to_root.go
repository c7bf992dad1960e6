package backend

// gatherToRoot: every active rank writes each chunk of its input into the
// root's slot; the root copies them to their places (by slot) in out,
// leaving the blocks of inactive slots as they were. A non-root ends by
// waiting for the root to have taken its last chunk (awaitRoot).
func gatherToRoot(g *Group, in, outBuf []byte, root int) error {
	nb := len(in)
	slot := g.SlotBytes()
	others := g.others()
	if g.rank == root {
		copy(outBuf[root*nb:], in)
	}
	for off := 0; off < nb; off += slot {
		c := in[off:min(off+slot, nb)]
		if g.rank != root {
			if err := g.send(chColl, []out{{peer: root, data: c}}); err != nil {
				return err
			}
			continue
		}
		for _, p := range others {
			s, err := g.recv(chColl, p)
			if err != nil {
				return err
			}
			copy(outBuf[p*nb+off:], s[:len(c)])
		}
		g.release(chColl, others...)
	}
	return g.awaitRoot(root)
}
