package backend

// allReduceDirect: every rank sends its whole input (at most one slot) to
// every other rank, then reduces all n inputs locally in rank order. One
// round trip; n-1 times the traffic of a ring, so only for small messages.
func allReduceDirect(g *Group, buf []byte, count int, dt DType, op ReduceOp) error {
	others := g.others()
	msgs := make([]out, 0, len(others))
	for _, p := range others {
		msgs = append(msgs, out{peer: p, data: buf})
	}
	if err := g.send(chColl, msgs); err != nil {
		return err
	}
	srcs := make([][]byte, 0, len(g.act)) // ascending rank
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

// others lists every active rank but this one, ascending.
func (g *Group) others() []int {
	o := make([]int, 0, len(g.act))
	for _, p := range g.act {
		if p != g.rank {
			o = append(o, p)
		}
	}
	return o
}
