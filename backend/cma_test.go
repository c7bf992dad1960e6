package backend

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
)

// cmaSizes: one byte, odd sizes, below and above cmaMinBytes, more than a
// slot, and a block well over a MiB.
var cmaSizes = []int{1, 17, testSlot + 3, cmaMinBytes - 1, cmaMinBytes + 5, 1<<20 + 7}

// The CMA all_gather against the reference for 1-8 ranks: into a fresh
// output, in place, and from an input that overlaps the output elsewhere
// (read from the scratch copy); the group agrees on CMA (in-process ranks
// may read each other) and the input is left as it was.
func TestCMAAllGather(t *testing.T) {
	for n := 1; n <= 8; n++ {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			me := g.Rank()
			for seed, nb := range cmaSizes {
				if n > 4 && nb > 1<<20 {
					continue // keeps the test to seconds
				}
				var want []byte
				for r := range n {
					want = append(want, bytesOf(r, nb, seed)...)
				}
				in := bytesOf(me, nb, seed)
				outb := bytes.Repeat([]byte{0xee}, n*nb)
				runColl(t, g, "cma all_gather", func() error { return allGatherCMA(g, in, outb) })
				if !bytes.Equal(outb, want) || !bytes.Equal(in, bytesOf(me, nb, seed)) {
					t.Errorf("rank %d of %d: cma all_gather of %d bytes: wrong result or changed input", me, n, nb)
				}
				if on, _ := g.cmaOn(); n > 1 && !on {
					t.Errorf("rank %d of %d: in-process ranks did not agree on CMA", me, n)
				}
				inPlace := bytes.Repeat([]byte{0xee}, n*nb)
				copy(inPlace[me*nb:], bytesOf(me, nb, seed))
				runColl(t, g, "cma in-place all_gather", func() error { return allGatherCMA(g, inPlace[me*nb:(me+1)*nb], inPlace) })
				if !bytes.Equal(inPlace, want) {
					t.Errorf("rank %d of %d: cma in-place all_gather of %d bytes: wrong result", me, n, nb)
				}
				// the input sits in the next rank's block of the output
				shifted := bytes.Repeat([]byte{0xee}, n*nb)
				at := (me + 1) % n * nb
				copy(shifted[at:], bytesOf(me, nb, seed))
				runColl(t, g, "cma overlapping all_gather", func() error { return allGatherCMA(g, shifted[at:at+nb], shifted) })
				if !bytes.Equal(shifted, want) {
					t.Errorf("rank %d of %d: cma all_gather of %d bytes from an overlapping input: wrong result", me, n, nb)
				}
			}
		})
	}
}

// The CMA all_to_all against the senders' bytes for 1-8 ranks: uneven
// blocks, some empty, inline (below cmaMinBytes) and read ones in one op,
// and in place (input and output the same buffer).
func TestCMAAllToAll(t *testing.T) {
	forceAlgorithm(t, &forcedAllToAll, "cma")
	for n := 1; n <= 8; n++ {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			me := g.Rank()
			for _, scale := range []int{3, cmaMinBytes/3 + 1, 100_003} {
				send, recv := make([]int, n), make([]int, n)
				var in []byte
				for d := range n {
					send[d] = a2aSize(me, d, scale)
					recv[d] = a2aSize(d, me, scale)
					in = append(in, bytesOf(me*100+d, send[d], scale)...)
				}
				check := func(what string, outb []byte) {
					at := 0
					for s := range n {
						if !bytes.Equal(outb[at:at+recv[s]], bytesOf(s*100+me, recv[s], scale)) {
							t.Errorf("rank %d of %d: %s block from %d wrong (scale %d)", me, n, what, s, scale)
						}
						at += recv[s]
					}
				}
				outb := make([]byte, sum(recv))
				w, err := g.AllToAll(in, outb, send, recv)
				must(t, g, "all_to_all", w, err)
				check("cma all_to_all", outb)
				// in place: equal sizes both ways, one buffer
				eq := make([]int, n)
				var buf []byte
				for d := range n {
					eq[d] = scale + d + me // to d; d sends me scale+me+d too
					buf = append(buf, bytesOf(me*100+d, eq[d], scale)...)
				}
				w, err = g.AllToAll(buf, buf, eq, eq)
				must(t, g, "in-place all_to_all", w, err)
				at := 0
				for s := range n {
					if !bytes.Equal(buf[at:at+eq[s]], bytesOf(s*100+me, eq[s], scale)) {
						t.Errorf("rank %d of %d: in-place all_to_all block from %d wrong (scale %d)", me, n, s, scale)
					}
					at += eq[s]
				}
			}
		})
	}
}

func sum(v []int) int {
	t := 0
	for _, x := range v {
		t += x
	}
	return t
}

// Every element type through the CMA all_gather and all_to_all, odd
// counts, blocks read with CMA.
func TestCMAEveryDType(t *testing.T) {
	forceCMA(t)
	for _, n := range []int{2, 3} {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			for seed, dt := range allDTypes {
				count := cmaMinBytes/dt.Size() + 3
				var want []byte
				for r := range n {
					want = append(want, input(dt, r, count, seed)...)
				}
				outb := make([]byte, len(want))
				w, err := g.AllGather(input(dt, g.Rank(), count, seed), outb)
				must(t, g, fmt.Sprintf("all_gather %v x%d", dt, count), w, err)
				if !bytes.Equal(outb, want) {
					t.Errorf("rank %d: all_gather %v x%d: wrong result", g.Rank(), dt, count)
				}
				nb := count * dt.Size()
				sizes := make([]int, n)
				var in []byte
				for d := range n {
					sizes[d] = nb
					in = append(in, input(dt, 10*g.Rank()+d, count, seed)...)
				}
				a2a := make([]byte, n*nb)
				w, err = g.AllToAll(in, a2a, sizes, sizes)
				must(t, g, fmt.Sprintf("all_to_all %v x%d", dt, count), w, err)
				for s := range n {
					if !bytes.Equal(a2a[s*nb:(s+1)*nb], input(dt, 10*s+g.Rank(), count, seed)) {
						t.Errorf("rank %d: all_to_all %v x%d: block from %d wrong", g.Rank(), dt, count, s)
					}
				}
			}
		})
	}
}

// fallbackOps runs an all_gather and an all_to_all that read with CMA
// where the group does (forceCMA), checks their results, and checks that
// the group did not agree on CMA.
func fallbackOps(t *testing.T, g *Group) {
	n, me, nb := 3, g.Rank(), cmaMinBytes+11
	var want []byte
	for r := range n {
		want = append(want, bytesOf(r, nb, 1)...)
	}
	outb := make([]byte, n*nb)
	w, err := g.AllGather(bytesOf(me, nb, 1), outb)
	must(t, g, "all_gather", w, err)
	if !bytes.Equal(outb, want) {
		t.Errorf("rank %d: fallback all_gather: wrong result", me)
	}
	sizes := []int{nb, nb, nb}
	var in []byte
	for d := range n {
		in = append(in, bytesOf(me*100+d, nb, 2)...)
	}
	a2a := make([]byte, n*nb)
	w, err = g.AllToAll(in, a2a, sizes, sizes)
	must(t, g, "all_to_all", w, err)
	for s := range n {
		if !bytes.Equal(a2a[s*nb:(s+1)*nb], bytesOf(s*100+me, nb, 2)) {
			t.Errorf("rank %d: fallback all_to_all block from %d wrong", me, s)
		}
	}
	if on, err := g.cmaOn(); on || err != nil {
		t.Errorf("rank %d: the group uses CMA (%v) where one rank cannot", me, err)
	}
}

// A kernel that refuses one rank's probe of one peer (EPERM): every rank
// of the group falls back to the copying algorithms, with right results.
func TestCMAFallsBackWhereTheKernelRefuses(t *testing.T) {
	real := cmaRead
	defer func() { cmaRead = real }()
	cmaRead = func(g *Group, peer, pid int, addr uintptr, dst []byte) error {
		if g.Rank() == 1 && peer == 0 {
			return syscall.EPERM
		}
		return real(g, peer, pid, addr, dst)
	}
	forceCMA(t)
	ranks(t, 3, testSlot, fallbackOps)
}

// MC_PG_CMA=0 turns CMA off: the group falls back, with right results.
func TestCMAOffByEnvironment(t *testing.T) {
	t.Setenv("MC_PG_CMA", "0")
	if CMAReason() == "" {
		t.Fatal("MC_PG_CMA=0 gives no reason to refuse")
	}
	forceCMA(t)
	ranks(t, 3, testSlot, fallbackOps)
}

// forceCMA makes every all_gather and all_to_all of the test take the CMA
// path (which falls back where the group does not read with CMA).
func forceCMA(t *testing.T) {
	forceAllGather(t, "cma")
	forceAlgorithm(t, &forcedAllToAll, "cma")
}

// forceAllGather makes every all_gather of the test use algorithm (as
// MC_PG_ALLGATHER_ALGO does): a group of four reads with CMA only when
// forced.
func forceAllGather(t *testing.T, algorithm string) {
	forceAlgorithm(t, &forcedAllGather, algorithm)
}

// forceAlgorithm sets one of the forced-algorithm choices of select.go
// for the test.
func forceAlgorithm(t *testing.T, choice *string, algorithm string) {
	old := *choice
	*choice = algorithm
	t.Cleanup(func() { *choice = old })
}

// A read of a peer's buffer that fails (the peer's process gone: ESRCH)
// is that peer's failure: the op completes on the other ranks marking it
// failed, and they go on without it.
func TestCMAFailedReadFailsThePeer(t *testing.T) {
	forceAllGather(t, "cma")
	real := cmaRead
	defer func() { cmaRead = real }()
	var failing atomic.Bool
	failing.Store(true)
	cmaRead = func(g *Group, peer, pid int, addr uintptr, dst []byte) error {
		if peer == 2 && len(dst) > 16 && failing.Load() {
			return syscall.ESRCH
		}
		return real(g, peer, pid, addr, dst)
	}
	const nb = 64 << 10
	deathScenario(t, 4, 2, testSlot, func(g *Group) {
		outb := make([]byte, 4*nb)
		if w, err := g.AllGather(bytesOf(2, nb, 3), outb); err == nil {
			w.Wait(0)
		}
	}, func(t *testing.T, g *Group) {
		outb := make([]byte, 4*nb)
		w, err := g.AllGather(bytesOf(g.Rank(), nb, 3), outb)
		expectFailedOp(t, g, "all_gather reading a failing rank", w, err, 2, false)
		failing.Store(false)
		survivorsContinue(t, g)
	})
}

// A rank that dies during a CMA all_gather: the survivors' op completes,
// marks it failed (or, when it finished first, succeeds with right
// blocks), and they go on without it.
func TestDeathDuringCMAAllGather(t *testing.T) {
	forceAllGather(t, "cma")
	const nb = 4 << 20
	died := make(chan struct{})
	deathScenario(t, 4, 2, 64<<10, func(g *Group) {
		g.AllGather(bytesOf(2, nb, 4), make([]byte, 4*nb))
		close(died)
	}, func(t *testing.T, g *Group) {
		me := g.Rank()
		outb := make([]byte, 4*nb)
		w, err := g.AllGather(bytesOf(me, nb, 4), outb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Wait(0); err != nil {
			t.Fatalf("rank %d: all_gather during the death raised: %v", me, err)
		}
		<-died
		switch {
		case w.LocalSuccess():
			for _, p := range []int{0, 1, 3} {
				if !bytes.Equal(outb[p*nb:(p+1)*nb], bytesOf(p, nb, 4)) {
					t.Errorf("rank %d: all_gather that succeeded has a wrong block from rank %d", me, p)
				}
			}
		case fmt.Sprint(w.FailedRanks()) != "[2]":
			t.Errorf("rank %d: all_gather during the death: failed %v, want [2]", me, w.FailedRanks())
		}
		survivorsContinue(t, g)
	})
}
