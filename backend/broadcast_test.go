package backend

import (
	"bytes"
	"testing"
)

// Both broadcast algorithms from every root against the root's bytes, for
// 1-8 ranks and sizes below, at and across the slot size (more chunks
// than slots), several ops in a row so that slots are reused.
func TestBroadcastAlgorithms(t *testing.T) {
	algos := []struct {
		name string
		fn   broadcastFn
	}{{"push", broadcastOneToAll}, {"pull", broadcastPull}}
	for n := 1; n <= 8; n++ {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			for _, a := range algos {
				for seed, nb := range []int{0, 1, 17, testSlot, 3*testSlot + 5} {
					for root := range n {
						buf := bytesOf(g.Rank(), nb, seed)
						runColl(t, g, a.name+" broadcast", func() error { return a.fn(g, buf, root) })
						if !bytes.Equal(buf, bytesOf(root, nb, seed)) {
							t.Errorf("rank %d of %d: %s broadcast of %d bytes from %d: wrong result", g.Rank(), n, a.name, nb, root)
						}
					}
				}
			}
		})
	}
}
