package backend

import (
	"bytes"
	"fmt"
	"testing"
)

// runColl runs algo as the group's next collective, waits for it, and
// checks that no pull slot it lent is still being read.
func runColl(t *testing.T, g *Group, what string, algo func() error) {
	t.Helper()
	w, err := g.start(g.coll, algo, nil)
	must(t, g, what, w, err)
	checkPullsAcknowledged(t, g, what)
}

// Both all_gather algorithms against the reference (every rank's bytes in
// rank order), for 1-8 ranks, sizes below, at and across the slot size
// (more chunks than pull slots), into a fresh output and in place (the
// input is this rank's block of the output), several ops in a row so that
// slots are reused across ops.
func TestAllGatherAlgorithms(t *testing.T) {
	algos := []struct {
		name string
		fn   allGatherFn
	}{{"direct", allGatherDirect}, {"pull", allGatherPull}}
	for n := 1; n <= 8; n++ {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			me := g.Rank()
			for _, a := range algos {
				name, algo := a.name, a.fn
				for seed, nb := range []int{0, 1, 17, testSlot - 1, testSlot, 3*testSlot + 5} {
					want := make([]byte, 0, n*nb)
					for r := range n {
						want = append(want, bytesOf(r, nb, seed)...)
					}
					out := bytes.Repeat([]byte{0xee}, n*nb)
					in := bytesOf(me, nb, seed)
					runColl(t, g, name+" all_gather", func() error { return algo(g, in, out) })
					if !bytes.Equal(out, want) {
						t.Errorf("rank %d of %d: %s all_gather of %d bytes: wrong result", me, n, name, nb)
					}
					if !bytes.Equal(in, bytesOf(me, nb, seed)) {
						t.Errorf("rank %d of %d: %s all_gather of %d bytes changed its input", me, n, name, nb)
					}
					inPlace := bytes.Repeat([]byte{0xee}, n*nb)
					copy(inPlace[me*nb:], bytesOf(me, nb, seed))
					runColl(t, g, name+" in-place all_gather", func() error {
						return algo(g, inPlace[me*nb:(me+1)*nb], inPlace)
					})
					if !bytes.Equal(inPlace, want) {
						t.Errorf("rank %d of %d: %s in-place all_gather of %d bytes: wrong result", me, n, name, nb)
					}
				}
			}
		})
	}
}

// Every element type through the chosen all_gather (bytes are bytes, but
// odd element counts of every width must land at the right offsets).
func TestAllGatherEveryDType(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			for seed, dt := range allDTypes {
				for _, count := range []int{1, 3, 2*testSlot/dt.Size() + 1} {
					var want []byte
					for r := range n {
						want = append(want, input(dt, r, count, seed)...)
					}
					out := make([]byte, len(want))
					w, err := g.AllGather(input(dt, g.Rank(), count, seed), out)
					must(t, g, fmt.Sprintf("all_gather %v x%d", dt, count), w, err)
					if !bytes.Equal(out, want) {
						t.Errorf("rank %d of %d: all_gather %v x%d: wrong result", g.Rank(), n, dt, count)
					}
				}
			}
		})
	}
}

// Over TCP, the pull all_gather reads the peers' pull slots with Transfer
// Engine READs.
func TestAllGatherPullOverTCP(t *testing.T) {
	t.Setenv("MC_FORCE_TCP", "true")
	ranks(t, 3, testSlot, func(t *testing.T, g *Group) {
		nb := 5*testSlot + 3
		out := make([]byte, 3*nb)
		runColl(t, g, "pull all_gather", func() error { return allGatherPull(g, bytesOf(g.Rank(), nb, 7), out) })
		for r := range 3 {
			if !bytes.Equal(out[r*nb:(r+1)*nb], bytesOf(r, nb, 7)) {
				t.Errorf("rank %d: pull all_gather over TCP: block %d wrong", g.Rank(), r)
			}
		}
	})
}
