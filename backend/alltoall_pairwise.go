package backend

// allToAllPairwise: in round r every active rank writes chunk r of its
// block for each active peer into that peer's slot and receives chunk r of
// each active peer's block for it. Pairs exchange ceil(bytes/stepBytes)
// messages, so uneven splits (and empty blocks) need no extra agreement;
// the peers are g.act, the same on every active rank. The sizes have one
// entry per slot (the world size): blocks of inactive slots are neither
// sent nor written.
func allToAllPairwise(g *Group, in, outBuf []byte, sendBytes, recvBytes []int) error {
	n := len(sendBytes)
	var sob, rob [smallGroup + 1]int
	soff, roff := room(sob[:], n+1), room(rob[:], n+1)
	for p := range n {
		soff[p+1] = soff[p] + sendBytes[p]
		roff[p+1] = roff[p] + recvBytes[p]
	}
	own := func() { copy(outBuf[roff[g.rank]:roff[g.rank+1]], in[soff[g.rank]:soff[g.rank+1]]) }
	step := g.stepBytes()
	rounds := 0
	others := g.others()
	for _, p := range others {
		rounds = max(rounds, (sendBytes[p]+step-1)/step, (recvBytes[p]+step-1)/step)
	}
	if rounds == 0 {
		own()
		return nil
	}
	var mb [smallGroup]out
	msgs := room(mb[:], len(others))[:0]
	var gb [smallGroup]int
	got := room(gb[:], len(others))[:0]
	for r := range rounds {
		at := r * step
		msgs = msgs[:0]
		for _, p := range others {
			if at < sendBytes[p] {
				msgs = append(msgs, out{peer: p, data: in[soff[p]+at : soff[p]+min(sendBytes[p], at+step)]})
			}
		}
		if err := g.send(chColl, msgs); err != nil {
			return err
		}
		if r == 0 { // while the peers copy out what they just got
			own()
		}
		got = got[:0]
		for _, p := range others {
			if at < recvBytes[p] {
				s, err := g.recv(chColl, p)
				if err != nil {
					return err
				}
				copy(outBuf[roff[p]+at:roff[p]+min(recvBytes[p], at+step)], s)
				got = append(got, p)
			}
		}
		g.release(chColl, got...)
	}
	return nil
}
