package backend

// allGatherCMA: when the group reads its peers with CMA (cma.go), every
// active rank sends each peer one message naming its input, reads each
// peer's input straight into that peer's block of out (process_vm_readv,
// ring order from this rank on), acknowledges it, and ends once every
// peer has acknowledged reading its own input: one copy per byte and one
// message per pair, whatever the size. Otherwise the copying algorithm
// for the size runs.
func allGatherCMA(g *Group, in, outBuf []byte) error {
	on, err := g.cmaOn()
	if err != nil {
		return err
	}
	nb := len(in)
	if !on {
		return copyingAllGather(g, nb)(g, in, outBuf)
	}
	own := outBuf[g.rank*nb : (g.rank+1)*nb]
	src := g.cmaSource(in, outBuf, own)
	others := g.othersInRingOrder()
	if err := g.sendAll(others, cmaDesc(src, nb)); err != nil {
		return err
	}
	copy(own, src) // this rank's own block, while the peers read
	for _, p := range others {
		s, err := g.recv(chColl, p)
		if err != nil {
			return err
		}
		err = g.cmaReadFrom(p, s, outBuf[p*nb:(p+1)*nb])
		g.release(chColl, p)
		if err != nil {
			return err
		}
	}
	return g.awaitReaders(others)
}
