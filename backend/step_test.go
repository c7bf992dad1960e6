package backend

import (
	"bytes"
	"testing"
)

// With slots larger than maxStepBytes (the 4 MiB default of small groups),
// the pushing algorithms cut tensors into stepBytes pieces: the results are
// right, and the number of messages to the peer is the number of pieces.
func TestChunkedAlgorithmsStepBelowSlot(t *testing.T) {
	t.Setenv("MC_PG_CMA", "0") // the copying algorithms (with CMA all_gather and all_to_all send one message per pair)
	const slot = 4 << 20
	ranks(t, 2, slot, func(t *testing.T, g *Group) {
		me, peer := g.Rank(), 1-g.Rank()
		if g.stepBytes() != maxStepBytes {
			t.Fatalf("stepBytes %d with %d-byte slots, want %d", g.stepBytes(), slot, maxStepBytes)
		}
		sentTo := func() uint64 { return g.sent[chColl][peer] }
		// The group's first op that could read with CMA agrees on it first
		// (cma.go: two messages per pair); agree before counting.
		w, err := g.AllToAll(nil, nil, []int{0, 0}, []int{0, 0})
		must(t, g, "empty all_to_all", w, err)

		nb := 3*maxStepBytes + 5
		want := append(bytesOf(0, nb, 1), bytesOf(1, nb, 1)...)
		got := make([]byte, 2*nb)
		before := sentTo()
		w, err = g.AllGather(bytesOf(me, nb, 1), got)
		must(t, g, "all_gather", w, err)
		if !bytes.Equal(got, want) {
			t.Errorf("rank %d: all_gather of %d bytes wrong", me, nb)
		}
		if d := sentTo() - before; d != 4 {
			t.Errorf("rank %d: all_gather of %d bytes sent %d messages, want 4 pieces of at most %d", me, nb, d, maxStepBytes)
		}

		// 2-rank all_reduce above stepBytes: reduce-scatter + all-gather in
		// chunks of 2*stepBytes, two messages (one each way) per chunk.
		count := 3*maxStepBytes/4 + 5
		bufs := [][]byte{input(Float32, 0, count, 2), input(Float32, 1, count, 2)}
		ref := refReduce(Float32, Sum, bufs, count)
		buf := append([]byte(nil), bufs[me]...)
		before = sentTo()
		w, err = g.AllReduce(buf, count, Float32, Sum)
		must(t, g, "all_reduce", w, err)
		if !bytes.Equal(buf, ref) {
			t.Errorf("rank %d: all_reduce of %d floats wrong", me, count)
		}
		if d := sentTo() - before; d != 4 {
			t.Errorf("rank %d: all_reduce of %d bytes sent %d messages, want 2 chunks x 2", me, count*4, d)
		}

		// reduce_scatter, all_to_all and broadcast: 4 pieces of each block.
		ins := [][]byte{input(Float32, 0, 2*count, 3), input(Float32, 1, 2*count, 3)}
		blocks := [][]byte{ins[0][me*count*4 : (me+1)*count*4], ins[1][me*count*4 : (me+1)*count*4]}
		outRS := make([]byte, count*4)
		before = sentTo()
		w, err = g.ReduceScatter(ins[me], outRS, count, Float32, Sum)
		must(t, g, "reduce_scatter", w, err)
		if !bytes.Equal(outRS, refReduce(Float32, Sum, blocks, count)) {
			t.Errorf("rank %d: reduce_scatter of %d floats per rank wrong", me, count)
		}
		if d := sentTo() - before; d != 4 {
			t.Errorf("rank %d: reduce_scatter sent %d messages, want 4", me, d)
		}

		in := append(bytesOf(me, nb, 4), bytesOf(me+2, nb, 4)...) // blocks for rank 0, rank 1
		outA2A := make([]byte, 2*nb)
		before = sentTo()
		w, err = g.AllToAll(in, outA2A, []int{nb, nb}, []int{nb, nb})
		must(t, g, "all_to_all", w, err)
		if wantA2A := append(bytesOf(2*me, nb, 4), bytesOf(2*me+1, nb, 4)...); !bytes.Equal(outA2A, wantA2A) {
			t.Errorf("rank %d: all_to_all of %d-byte blocks wrong", me, nb)
		}
		if d := sentTo() - before; d != 4 {
			t.Errorf("rank %d: all_to_all sent %d messages, want 4", me, d)
		}

		bc := bytesOf(me, nb, 5)
		before = sentTo()
		w, err = g.Broadcast(bc, 0)
		must(t, g, "broadcast", w, err)
		if !bytes.Equal(bc, bytesOf(0, nb, 5)) {
			t.Errorf("rank %d: broadcast of %d bytes wrong", me, nb)
		}
		if want := map[int]uint64{0: 4, 1: 0}[me]; sentTo()-before != want {
			t.Errorf("rank %d: broadcast sent %d messages, want %d", me, sentTo()-before, want)
		}
	})
}
