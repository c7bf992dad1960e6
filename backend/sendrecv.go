package backend

// sendTo and recvFrom carry point-to-point messages over the P2P channel,
// one slot-sized chunk per message (an empty buffer is one empty message),
// in order per peer.
//
// A send completes once the peer has taken its last message (the peer's
// acknowledgement of it), as upstream's sends complete only against the
// receiver's credit: delivery alone proves nothing on the same host,
// where the bytes land in the peer's memory without its cooperation (even
// from a rank about to exit, which never reads them). A send whose peer
// never receives it thus waits as a receive does: it fails when the peer
// exits or stops answering probes. A send the peer acknowledged is
// complete even if the peer exits right after: it took the bytes.
func sendTo(g *Group, buf []byte, peer int) error {
	slot := g.lay.slot[chP2P]
	for off := 0; ; off += slot {
		if err := g.send(chP2P, []out{{peer: peer, data: buf[off:min(off+slot, len(buf))]}}); err != nil {
			return err
		}
		if off+slot >= len(buf) {
			break
		}
	}
	return g.waitAtLeast(chP2P, fAck, peer, g.sent[chP2P][peer], g.timeout(chP2P))
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
