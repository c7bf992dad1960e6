package backend

// sendTo and recvFrom carry point-to-point messages over the P2P channel,
// one slot-sized chunk per message (an empty buffer is one empty message),
// in order per peer.
//
// A send into a same-host peer lands in its memory whether or not its
// process still runs (the mapping outlives it), where over TCP the
// peer's engine has to take the bytes. So a send ends by looking at the
// peer's process: one that has exited or begun to exit fails the send as
// a write to it over TCP would, whether it died before the bytes landed
// or after (it reads nothing more either way).
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
	if p := g.peer(peer); p != nil && g.engine.PeerExited(p.seg) {
		return peerFailure(peer, "rank %d (%s) exited", peer, p.name)
	}
	return nil
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
