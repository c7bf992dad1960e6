package backend

// allGatherPull: every active rank copies each slot-sized chunk of its
// input once into one of its own pull slots and lends it to every active
// peer; each peer copies the chunk straight from that buffer to its place
// (by slot) in out (pull.go). A rank copies its input once instead of once
// per peer: per rank n+1 copies of a block instead of 2n-1, the same for
// two ranks. Peers are read in ring order from this rank on, so that the
// readers of one op start at different ranks' buffers. The op ends once
// every peer has read this rank's chunks.
func allGatherPull(g *Group, in, outBuf []byte) error {
	nb := len(in)
	slot := g.SlotBytes()
	others := g.othersInRingOrder()
	for k, off := 0, 0; off < nb; k, off = k+1, off+slot {
		c := in[off:min(off+slot, nb)]
		s := g.pullSlot(k)
		if err := g.offerPull(s, c, others); err != nil {
			return err
		}
		// This rank's own block, while the peers read the chunk.
		copy(outBuf[g.rank*nb+off:], c)
		for _, p := range others {
			if err := g.pullFrom(p, s, outBuf[p*nb+off:p*nb+off+len(c)]); err != nil {
				return err
			}
		}
		g.release(chColl, others...)
	}
	return g.awaitPullReaders((nb + slot - 1) / slot)
}
