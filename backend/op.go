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

// OpOption modifies how one op is run. (It returns the changed
// configuration rather than writing through a pointer, which would move
// every op's configuration to the heap.)
type OpOption func(opConfig) opConfig

type opConfig struct{ inline bool }

// Inline runs the op on the calling goroutine when its queue is idle
// (otherwise it is queued as usual), so the returned Work is already
// complete: for callers that wait for the op at once, it saves two thread
// hand-offs. FIFO order with queued ops is kept.
func Inline() OpOption {
	return func(c opConfig) opConfig {
		c.inline = true
		return c
	}
}

func (g *Group) start(q *fifo, fn func() error, opts []OpOption) (*Work, error) {
	if err := g.usable(); err != nil {
		return nil, err
	}
	if g.quiescing.Load() {
		return nil, fmt.Errorf("%w: rank %d is joining the group (join_group in progress)", ErrInvalid, g.rank)
	}
	var c opConfig
	for _, o := range opts {
		c = o(c)
	}
	if !g.life.enter() {
		return nil, ErrClosed
	}
	return g.run(q, fn, c.inline), nil
}

// needWithin refuses, before any communication, an op whose buffers were
// validated for world size ws when an active slot lies beyond it (the
// group grew between submission and run): blocks are indexed by slot.
func (g *Group) needWithin(what string, ws int) error {
	if n := len(g.act); n > 0 && g.act[n-1] >= ws {
		return fmt.Errorf("%w: %s was sized for world size %d, which is now %d", ErrInvalid, what, ws, g.act[n-1]+1)
	}
	return nil
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
		return chooseBroadcast(g, len(buf))(g, buf, root)
	}, opts)
}

// Ops with one block per rank take WorldSize blocks (holes counted, see
// Group.WorldSize), indexed by slot: they move only the active ranks'
// blocks, and leave an inactive slot's block of the output as it was.

// blocksFor is how many blocks of n bytes buf holds for an op of world
// size ws: ws when it holds them all, else k when it holds exactly k < ws
// (sized for the ranks left after a death: the op waits for the group to
// shrink to k, awaitShrink), else ws (too small: the caller's check fails).
func blocksFor(buf []byte, n, ws int) int {
	if n > 0 && len(buf) < ws*n && len(buf) >= n && len(buf)%n == 0 {
		return len(buf) / n
	}
	return ws
}

// fitBlocks, at a collective's start, checks that its blocks blocks
// (submitted in world size ws) hold every active slot, waiting for the
// group to shrink when the caller sized them for fewer ranks.
func (g *Group) fitBlocks(what string, blocks, ws int) error {
	if blocks < ws {
		return g.awaitShrink(what, blocks)
	}
	return g.needWithin(what, ws)
}

// AllGather concatenates every active rank's in, in rank order, into out
// (WorldSize blocks, or fewer: see blocksFor).
func (g *Group) AllGather(in, out []byte, opts ...OpOption) (*Work, error) {
	ws := g.WorldSize()
	blocks := blocksFor(out, len(in), ws)
	if err := needBytes("all_gather output", len(out), blocks*len(in)); err != nil {
		return nil, err
	}
	out = out[:blocks*len(in)]
	return g.start(g.coll, func() error {
		if err := g.fitBlocks("all_gather", blocks, ws); err != nil {
			return err
		}
		return chooseAllGather(g, len(in))(g, in, out)
	}, opts)
}

// ReduceScatter reduces in (WorldSize blocks of count elements, or fewer:
// see blocksFor) across the active ranks; rank r gets the reduction of
// block r in out.
func (g *Group) ReduceScatter(in, out []byte, count int, dt DType, op ReduceOp, opts ...OpOption) (*Work, error) {
	if err := CheckReduction(dt, op); err != nil {
		return nil, err
	}
	ws, nb := g.WorldSize(), count*dt.Size()
	blocks := blocksFor(in, nb, ws)
	if err := needBytes("reduce_scatter input", len(in), blocks*nb); err != nil {
		return nil, err
	}
	if err := needBytes("reduce_scatter output", len(out), nb); err != nil {
		return nil, err
	}
	in, out = in[:blocks*nb], out[:nb]
	return g.start(g.coll, func() error {
		if err := g.fitBlocks("reduce_scatter", blocks, ws); err != nil {
			return err
		}
		return reduceScatterDirect(g, in, out, count, dt, op)
	}, opts)
}

// AllToAll sends sendBytes[p] bytes of in (packed in rank order) to each
// active rank p and receives recvBytes[p] bytes from each into out
// (packed); both have WorldSize entries.
func (g *Group) AllToAll(in, out []byte, sendBytes, recvBytes []int, opts ...OpOption) (*Work, error) {
	ws := g.WorldSize()
	if len(sendBytes) != ws || len(recvBytes) != ws {
		return nil, fmt.Errorf("%w: all_to_all needs %d send and receive sizes, got %d and %d", ErrInvalid, ws, len(sendBytes), len(recvBytes))
	}
	ts, tr := 0, 0
	for p := range ws {
		if sendBytes[p] < 0 || recvBytes[p] < 0 {
			return nil, fmt.Errorf("%w: negative all_to_all size", ErrInvalid)
		}
		ts += sendBytes[p]
		tr += recvBytes[p]
	}
	// (A rank beyond the world size is inactive: its op fails when it runs.)
	if g.rank < ws && sendBytes[g.rank] != recvBytes[g.rank] {
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
		if err := g.needWithin("all_to_all", ws); err != nil {
			return err
		}
		return chooseAllToAll()(g, in, out, s, r)
	}, opts)
}

// Reduce reduces count elements of buf across the active ranks into the
// (active) root's buf; other ranks' bufs are left as they were.
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
		if err := g.needActive("reduce root", root); err != nil {
			return err
		}
		return reduceToRoot(g, buf, count, dt, op, root)
	}, opts)
}

// Gather concatenates every active rank's in into the (active) root's out
// (WorldSize blocks; ignored elsewhere).
func (g *Group) Gather(in, out []byte, root int, opts ...OpOption) (*Work, error) {
	if err := g.checkRank("gather root", root); err != nil {
		return nil, err
	}
	ws := g.WorldSize()
	if g.rank == root {
		if err := needBytes("gather output", len(out), ws*len(in)); err != nil {
			return nil, err
		}
		out = out[:ws*len(in)]
	}
	return g.start(g.coll, func() error {
		if err := g.needActive("gather root", root); err != nil {
			return err
		}
		if err := g.needWithin("gather", ws); err != nil {
			return err
		}
		return gatherToRoot(g, in, out, root)
	}, opts)
}

// Scatter sends block p of the (active) root's in (WorldSize blocks of
// len(out)) to each active rank p.
func (g *Group) Scatter(in, out []byte, root int, opts ...OpOption) (*Work, error) {
	if err := g.checkRank("scatter root", root); err != nil {
		return nil, err
	}
	ws := g.WorldSize()
	if g.rank == root {
		if err := needBytes("scatter input", len(in), ws*len(out)); err != nil {
			return nil, err
		}
		in = in[:ws*len(out)]
	}
	return g.start(g.coll, func() error {
		if err := g.needActive("scatter root", root); err != nil {
			return err
		}
		if err := g.needWithin("scatter", ws); err != nil {
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
	if err := g.usable(); err != nil { // a closed group has no peers left
		return err
	}
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
