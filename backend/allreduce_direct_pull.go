package backend

import "github.com/mooncake-go/mooncake/transfer/channel"

// allReduceDirectPull: every rank copies its whole input (at most one slot)
// once into one of its pull slots and lends it to every peer; each rank then
// reduces all n inputs in rank order straight out of the peers' pull slots
// into its own buffer. One round trip like allReduceDirect, but one copy per
// rank instead of n-1 (one into every peer's slot): the reduction reads the
// peers' slots where they are (direct views of same-host peers' buffers;
// a READ into the stage slot for the others). The op ends once every peer
// has read this rank's slot.
func allReduceDirectPull(g *Group, buf []byte, count int, dt DType, op ReduceOp) error {
	others := g.others()
	s := g.pullSlot(0)
	ps, err := g.claimPull(s)
	if err != nil {
		return err
	}
	copy(ps, buf)
	if err := g.lendPull(s, others); err != nil {
		return err
	}
	for _, p := range others {
		if _, err := g.recv(chColl, p); err != nil {
			return err
		}
	}
	srcs := make([][]byte, len(g.act)) // ascending rank
	g.dirty = true
	err = g.viewPulls(s, len(buf), srcs, 0, buf, func() error { return Reduce(buf, srcs, dt, op, count) })
	g.release(chColl, others...)
	if err != nil {
		return err
	}
	return g.awaitPullReaders(1)
}

// viewPulls fills srcs[i:] with n bytes of pull slot s of active position
// i on (own stands for this rank) and runs fn while they are valid: a
// peer's slot is a direct view, valid only inside its AccessRemote call,
// so the calls nest, one per peer; a peer without a view is read into its
// stage slot.
func (g *Group) viewPulls(s, n int, srcs [][]byte, i int, own []byte, fn func() error) error {
	if i == len(srcs) {
		return fn()
	}
	p := g.act[i]
	if p == g.rank {
		srcs[i] = own
		return g.viewPulls(s, n, srcs, i+1, own, fn)
	}
	ep := g.endpoint(p)
	var ferr error
	ok, err := g.engine.AccessRemote(ep.Seg, ep.Base+uint64(g.lay.pull(s)), uint64(n), func(view []byte) {
		srcs[i] = view
		ferr = g.viewPulls(s, n, srcs, i+1, own, fn)
	})
	if err == nil && !ok {
		st := g.stage(chColl, p)[:n]
		if err = channel.GetWithin(g.engine, ep, uint64(g.lay.pull(s)), st, st, g.patience(chColl)); err == nil {
			srcs[i] = st
			return g.viewPulls(s, n, srcs, i+1, own, fn)
		}
	}
	if err != nil {
		return peerFailure(p, "read from %s: %v", g.describe([]int{p}), err)
	}
	return ferr
}
