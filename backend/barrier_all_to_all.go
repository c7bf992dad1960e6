package backend

// barrierAllToAll: every rank sends an empty message to every other rank
// and waits for theirs. No rank leaves before all have entered.
func barrierAllToAll(g *Group) error {
	others := g.others()
	var mb [smallGroup]out
	msgs := room(mb[:], len(others))[:0]
	for _, p := range others {
		msgs = append(msgs, out{peer: p})
	}
	if err := g.send(chColl, msgs); err != nil {
		return err
	}
	for _, p := range others {
		if _, err := g.recv(chColl, p); err != nil {
			return err
		}
	}
	g.release(chColl, others...)
	return nil
}
