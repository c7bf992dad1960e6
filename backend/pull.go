package backend

import "github.com/mooncake-go/mooncake/transfer/channel"

// Pull slots: a rank puts data once into one of its own nSlots pull slots,
// sends each reader an empty message, and the readers copy the data
// straight out of its buffer (pullFrom), then acknowledge the message as
// usual. Which slot an op's round uses is derived from the group's
// collective count, so every rank knows it without being told.

// pullSlot is the pull slot for round k of the current collective.
func (g *Group) pullSlot(k int) int { return int((g.collOps + uint64(k)) % nSlots) }

// claimPull waits until every reader of pull slot s is done with it and
// returns its bytes.
func (g *Group) claimPull(s int) ([]byte, error) {
	for p, seq := range g.pullLent[s] {
		if seq > 0 {
			if err := g.waitAtLeast(chColl, fAck, p, seq, g.collTimeout()); err != nil {
				return nil, err
			}
		}
	}
	off := g.lay.pull(s)
	return g.mem[off : off+g.SlotBytes()], nil
}

// lendPull sends each of peers an empty message that lets it read pull
// slot s, and records it so that claimPull waits for their acks.
func (g *Group) lendPull(s int, peers []int) error {
	msgs := make([]out, 0, len(peers))
	for _, p := range peers {
		msgs = append(msgs, out{peer: p})
	}
	if err := g.send(chColl, msgs); err != nil {
		return err
	}
	for _, p := range peers {
		g.pullLent[s][p] = g.sent[chColl][p]
	}
	return nil
}

// offerPull copies c into pull slot s, once its last readers are done
// with it, and lends the slot to peers.
func (g *Group) offerPull(s int, c []byte, peers []int) error {
	ps, err := g.claimPull(s)
	if err != nil {
		return err
	}
	copy(ps, c)
	return g.lendPull(s, peers)
}

// awaitPullReaders waits until every reader is done with what the first
// rounds rounds of the current collective lent (its last nSlots rounds:
// earlier ones were awaited before their slot was filled again). A rank
// whose peers read from its memory must not finish the op while they
// still do: it could exit next, taking that memory with it, and fail the
// reads of a slower peer. It ends the op: a failure here finds the op
// done on this rank (tail).
func (g *Group) awaitPullReaders(rounds int) error {
	for k := range min(rounds, nSlots) {
		if _, err := g.claimPull(g.pullSlot(k)); err != nil {
			return tail(err)
		}
	}
	return nil
}

// pullFrom waits for peer's next message (which lends its pull slot s) and
// copies len(dst) bytes of that slot into dst (a direct read for same-host
// peers, a Transfer Engine READ otherwise). The caller releases the message.
func (g *Group) pullFrom(peer, s int, dst []byte) error {
	if _, err := g.recv(chColl, peer); err != nil {
		return err
	}
	if err := channel.GetWithin(g.engine, g.endpoint(peer), uint64(g.lay.pull(s)), dst, g.stage(chColl, peer), g.patience(chColl)); err != nil {
		return peerFailure(peer, "read from %s: %v", g.describe([]int{peer}), err)
	}
	return nil
}
