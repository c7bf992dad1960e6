package backend

import (
	"bytes"
	"testing"
)

// With slots larger than maxStepBytes (the 4 MiB default of small groups),
// the chunked algorithms cut tensors into stepBytes pieces: the results are
// right, and the number of messages to the peer is the number of pieces.
func TestChunkedAlgorithmsStepBelowSlot(t *testing.T) {
	const slot = 4 << 20
	ranks(t, 2, slot, func(t *testing.T, g *Group) {
		me, peer := g.Rank(), 1-g.Rank()
		if g.stepBytes() != maxStepBytes {
			t.Fatalf("stepBytes %d with %d-byte slots, want %d", g.stepBytes(), slot, maxStepBytes)
		}
		sentTo := func() uint64 { return g.sent[chColl][peer] }

		nb := 3*maxStepBytes + 5
		want := append(bytesOf(0, nb, 1), bytesOf(1, nb, 1)...)
		got := make([]byte, 2*nb)
		before := sentTo()
		w, err := g.AllGather(bytesOf(me, nb, 1), got)
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
	})
}
