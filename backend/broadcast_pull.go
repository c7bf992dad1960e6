package backend

// broadcastPull: the root copies each chunk once into one of its pull
// slots and lends it to every peer, which copies the chunk straight from
// the root's buffer into its own (pull.go). The root copies the data once
// instead of once per peer: the group moves n copies instead of 2(n-1).
// With two pull slots the root fills chunk k+1 while the peers read chunk k;
// the root's op ends once every peer has read the last chunks.
func broadcastPull(g *Group, buf []byte, root int) error {
	slot := g.SlotBytes()
	others := g.others()
	for k, off := 0, 0; off < len(buf); k, off = k+1, off+slot {
		c := buf[off:min(off+slot, len(buf))]
		s := g.pullSlot(k)
		if g.rank == root {
			if err := g.offerPull(s, c, others); err != nil {
				return err
			}
			continue
		}
		if err := g.pullFrom(root, s, c); err != nil {
			return err
		}
		g.release(chColl, root)
	}
	if g.rank == root {
		return g.awaitPullReaders((len(buf) + slot - 1) / slot)
	}
	return nil
}
