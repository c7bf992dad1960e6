package backend

// allReduceDirect: every rank sends its whole input (at most one slot) to
// every other rank, then reduces all n inputs locally in rank order. One
// round trip; n-1 times the traffic of a ring, so only for small messages.
func allReduceDirect(g *Group, buf []byte, count int, dt DType, op ReduceOp) error {
	others := g.others()
	var mb [smallGroup]out
	msgs := room(mb[:], len(others))[:0]
	for _, p := range others {
		msgs = append(msgs, out{peer: p, data: buf})
	}
	if err := g.send(chColl, msgs); err != nil {
		return err
	}
	var sb [smallGroup][]byte
	srcs := room(sb[:], len(g.act))[:0] // ascending rank
	for _, p := range g.act {
		if p == g.rank {
			srcs = append(srcs, buf)
			continue
		}
		s, err := g.recv(chColl, p)
		if err != nil {
			return err
		}
		srcs = append(srcs, s[:len(buf)])
	}
	g.dirty = true
	err := Reduce(buf, srcs, dt, op, count)
	g.release(chColl, others...)
	return err
}

// others lists every active rank but this one, ascending. The slice is
// the group's, valid until the active ranks change (at a collective's
// start or re-run): read it, never write it.
func (g *Group) others() []int { return g.oth[:len(g.oth):len(g.oth)] }
