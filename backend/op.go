package backend

import "fmt"

// The ops. Each validates its arguments on the caller's goroutine (an
// invalid request returns an ErrInvalid error and no Work, and leaves the
// group untouched), then queues the op: collectives on the group's FIFO,
// sends and receives on the peer's send or receive queue. All buffers must
// stay valid, and untouched by the caller, until the Work completes.

func (g *Group) checkRank(what string, r int) error {
	if r < 0 || r >= g.size {
		return fmt.Errorf("%w: %s %d is not a rank of this group of size %d", ErrInvalid, what, r, g.size)
	}
	return nil
}

// OpOption modifies how one op is run.
type OpOption func(*opConfig)

type opConfig struct{ inline bool }

// Inline runs the op on the calling goroutine when its queue is idle
// (otherwise it is queued as usual), so the returned Work is already
// complete: for callers that wait for the op at once, it saves two thread
// hand-offs. FIFO order with queued ops is kept.
func Inline() OpOption { return func(c *opConfig) { c.inline = true } }

func (g *Group) start(q *fifo, fn func() error, opts []OpOption) (*Work, error) {
	if err := g.usable(); err != nil {
		return nil, err
	}
	if g.quiescing.Load() {
		return nil, fmt.Errorf("%w: rank %d is joining the group (join_group in progress)", ErrInvalid, g.rank)
	}
	var c opConfig
	for _, o := range opts {
		o(&c)
	}
	return g.run(q, fn, c.inline), nil
}

func needBytes(what string, have, want int) error {
	if have < want {
		return fmt.Errorf("%w: %s holds %d bytes, needs %d", ErrInvalid, what, have, want)
	}
	return nil
}

// AllReduce reduces count elements of buf in place across the group.
func (g *Group) AllReduce(buf []byte, count int, dt DType, op ReduceOp, opts ...OpOption) (*Work, error) {
	if err := CheckReduction(dt, op); err != nil {
		return nil, err
	}
	if err := needBytes("all_reduce buffer", len(buf), count*dt.Size()); err != nil {
		return nil, err
	}
	buf = buf[:count*dt.Size()]
	return g.start(g.coll, func() error { return chooseAllReduce(g, len(buf))(g, buf, count, dt, op) }, opts)
}

// Broadcast copies root's buf into every rank's buf.
func (g *Group) Broadcast(buf []byte, root int, opts ...OpOption) (*Work, error) {
	if err := g.checkRank("broadcast root", root); err != nil {
		return nil, err
	}
	return g.start(g.coll, func() error {
		if err := g.needActive("broadcast root", root); err != nil {
			return err
		}
		return chooseBroadcast(g)(g, buf, root)
	}, opts)
}

// AllGather concatenates every rank's in, in rank order, into out.
func (g *Group) AllGather(in, out []byte, opts ...OpOption) (*Work, error) {
	if err := needBytes("all_gather output", len(out), g.size*len(in)); err != nil {
		return nil, err
	}
	return g.start(g.coll, func() error { return allGatherDirect(g, in, out[:g.size*len(in)]) }, opts)
}

// ReduceScatter reduces in (size blocks of count elements) across the
// group; rank r gets the reduction of block r in out.
func (g *Group) ReduceScatter(in, out []byte, count int, dt DType, op ReduceOp, opts ...OpOption) (*Work, error) {
	if err := CheckReduction(dt, op); err != nil {
		return nil, err
	}
	nb := count * dt.Size()
	if err := needBytes("reduce_scatter input", len(in), g.size*nb); err != nil {
		return nil, err
	}
	if err := needBytes("reduce_scatter output", len(out), nb); err != nil {
		return nil, err
	}
	return g.start(g.coll, func() error {
		if err := g.needAllActive("reduce_scatter"); err != nil {
			return err
		}
		return reduceScatterDirect(g, in[:g.size*nb], out[:nb], count, dt, op)
	}, opts)
}

// AllToAll sends sendBytes[p] bytes of in (packed in rank order) to each
// rank p and receives recvBytes[p] bytes from each into out (packed).
func (g *Group) AllToAll(in, out []byte, sendBytes, recvBytes []int, opts ...OpOption) (*Work, error) {
	if len(sendBytes) != g.size || len(recvBytes) != g.size {
		return nil, fmt.Errorf("%w: all_to_all needs %d send and receive sizes, got %d and %d", ErrInvalid, g.size, len(sendBytes), len(recvBytes))
	}
	ts, tr := 0, 0
	for p := range g.size {
		if sendBytes[p] < 0 || recvBytes[p] < 0 {
			return nil, fmt.Errorf("%w: negative all_to_all size", ErrInvalid)
		}
		ts += sendBytes[p]
		tr += recvBytes[p]
	}
	if sendBytes[g.rank] != recvBytes[g.rank] {
		return nil, fmt.Errorf("%w: all_to_all sends %d bytes to itself but expects %d", ErrInvalid, sendBytes[g.rank], recvBytes[g.rank])
	}
	if err := needBytes("all_to_all input", len(in), ts); err != nil {
		return nil, err
	}
	if err := needBytes("all_to_all output", len(out), tr); err != nil {
		return nil, err
	}
	s, r := append([]int(nil), sendBytes...), append([]int(nil), recvBytes...)
	return g.start(g.coll, func() error {
		if err := g.needAllActive("all_to_all"); err != nil {
			return err
		}
		return allToAllPairwise(g, in, out, s, r)
	}, opts)
}

// Reduce reduces count elements of buf across the group into root's buf;
// other ranks' bufs are left as they were.
func (g *Group) Reduce(buf []byte, count int, dt DType, op ReduceOp, root int, opts ...OpOption) (*Work, error) {
	if err := CheckReduction(dt, op); err != nil {
		return nil, err
	}
	if err := g.checkRank("reduce root", root); err != nil {
		return nil, err
	}
	if err := needBytes("reduce buffer", len(buf), count*dt.Size()); err != nil {
		return nil, err
	}
	buf = buf[:count*dt.Size()]
	return g.start(g.coll, func() error {
		if err := g.needAllActive("reduce"); err != nil {
			return err
		}
		return reduceToRoot(g, buf, count, dt, op, root)
	}, opts)
}

// Gather concatenates every rank's in into root's out (ignored elsewhere).
func (g *Group) Gather(in, out []byte, root int, opts ...OpOption) (*Work, error) {
	if err := g.checkRank("gather root", root); err != nil {
		return nil, err
	}
	if g.rank == root {
		if err := needBytes("gather output", len(out), g.size*len(in)); err != nil {
			return nil, err
		}
		out = out[:g.size*len(in)]
	}
	return g.start(g.coll, func() error {
		if err := g.needAllActive("gather"); err != nil {
			return err
		}
		return gatherToRoot(g, in, out, root)
	}, opts)
}

// Scatter sends block p of root's in (size blocks of len(out)) to rank p.
func (g *Group) Scatter(in, out []byte, root int, opts ...OpOption) (*Work, error) {
	if err := g.checkRank("scatter root", root); err != nil {
		return nil, err
	}
	if g.rank == root {
		if err := needBytes("scatter input", len(in), g.size*len(out)); err != nil {
			return nil, err
		}
		in = in[:g.size*len(out)]
	}
	return g.start(g.coll, func() error {
		if err := g.needAllActive("scatter"); err != nil {
			return err
		}
		return scatterFromRoot(g, in, out, root)
	}, opts)
}

// Barrier completes on every rank once every rank has entered it.
func (g *Group) Barrier(opts ...OpOption) (*Work, error) {
	return g.start(g.coll, func() error { return barrierAllToAll(g) }, opts)
}

// Send sends buf to peer. Sends to one peer are delivered in order, each to
// that peer's matching Recv (no tags); a send needs no matching Recv to be
// posted yet unless it is longer than two P2P slots.
func (g *Group) Send(buf []byte, peer int, opts ...OpOption) (*Work, error) {
	if err := g.checkPeer(peer); err != nil {
		return nil, err
	}
	return g.start(g.sendQ[peer], func() error { return sendTo(g, buf, peer) }, opts)
}

// Recv receives the next Send from peer into buf, which must have the
// sender's length.
func (g *Group) Recv(buf []byte, peer int, opts ...OpOption) (*Work, error) {
	if err := g.checkPeer(peer); err != nil {
		return nil, err
	}
	return g.start(g.recvQ[peer], func() error { return recvFrom(g, buf, peer) }, opts)
}

func (g *Group) checkPeer(peer int) error {
	if err := g.checkRank("peer", peer); err != nil {
		return err
	}
	if peer == g.rank {
		return fmt.Errorf("%w: send/recv with oneself (rank %d)", ErrInvalid, peer)
	}
	if g.peer(peer) == nil {
		return fmt.Errorf("%w: rank %d has not joined the group", ErrInvalid, peer)
	}
	return nil
}
