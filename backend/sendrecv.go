package backend

// sendTo and recvFrom carry point-to-point messages over the P2P channel,
// one slot-sized chunk per message (an empty buffer is one empty message),
// in order per peer.
func sendTo(g *Group, buf []byte, peer int) error {
	slot := g.lay.slot[chP2P]
	for off := 0; ; off += slot {
		if err := g.send(chP2P, []out{{peer: peer, data: buf[off:min(off+slot, len(buf))]}}); err != nil {
			return err
		}
		if off+slot >= len(buf) {
			return nil
		}
	}
}

func recvFrom(g *Group, buf []byte, peer int) error {
	slot := g.lay.slot[chP2P]
	for off := 0; ; off += slot {
		c := buf[off:min(off+slot, len(buf))]
		s, err := g.recv(chP2P, peer)
		if err != nil {
			return err
		}
		copy(c, s)
		g.release(chP2P, peer)
		if off+slot >= len(buf) {
			return nil
		}
	}
}
