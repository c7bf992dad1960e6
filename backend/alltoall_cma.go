package backend

// allToAllCMA: when the group reads its peers with CMA (cma.go), every
// active rank sends each peer one message: a block smaller than
// cmaMinBytes (or than a step) inline, a larger one as the address of its
// place in the input, which the peer reads straight into its output
// (process_vm_readv). The op ends once every peer has acknowledged what
// it read. Empty blocks send nothing. Where the group does not read with
// CMA, the pairwise algorithm runs.
func allToAllCMA(g *Group, in, outBuf []byte, sendBytes, recvBytes []int) error {
	if on, err := g.cmaOn(); err != nil {
		return err
	} else if !on {
		return allToAllPairwise(g, in, outBuf, sendBytes, recvBytes)
	}
	n := len(sendBytes)
	soff, roff := make([]int, n+1), make([]int, n+1)
	for p := range n {
		soff[p+1] = soff[p] + sendBytes[p]
		roff[p+1] = roff[p] + recvBytes[p]
	}
	src := g.cmaSource(in[:soff[n]], outBuf, nil)
	inline := func(nb int) bool { return nb < min(cmaMinBytes, g.stepBytes()+1) }
	others := g.othersInRingOrder()
	msgs := make([]out, 0, len(others))
	var lent []int
	for _, p := range others {
		b := src[soff[p]:soff[p+1]]
		switch {
		case len(b) == 0:
		case inline(len(b)):
			msgs = append(msgs, out{peer: p, data: b})
		default:
			msgs = append(msgs, out{peer: p, data: cmaDesc(b, len(b))})
			lent = append(lent, p)
		}
	}
	if err := g.send(chColl, msgs); err != nil {
		return err
	}
	copy(outBuf[roff[g.rank]:roff[g.rank+1]], src[soff[g.rank]:soff[g.rank+1]])
	for _, p := range others {
		dst := outBuf[roff[p]:roff[p+1]]
		if len(dst) == 0 {
			continue
		}
		s, err := g.recv(chColl, p)
		if err != nil {
			return err
		}
		if inline(len(dst)) {
			copy(dst, s)
		} else {
			err = g.cmaReadFrom(p, s, dst)
		}
		g.release(chColl, p)
		if err != nil {
			return err
		}
	}
	return g.awaitReaders(lent)
}
