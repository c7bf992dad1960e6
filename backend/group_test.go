package backend

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// startRanks creates founders 0..n-1 of a group in-process, all at once,
// each with its own Runtime (its own Transfer Engine) from newRuntime, over
// real transports; cfg is every rank's GroupConfig but for Rank and Size.
// The returned slices have max(n, cfg.MaxSize) entries (nil past the
// founders); the test fails at once if a rank cannot join.
func startRanks(t *testing.T, n int, newRuntime func() *Runtime, cfg GroupConfig) ([]*Runtime, []*Group) {
	t.Helper()
	rts := make([]*Runtime, max(n, cfg.MaxSize))
	for r := range n {
		rts[r] = newRuntime()
	}
	gs, err := joinRanks(rts[:n], cfg)
	if err != nil {
		for _, rt := range rts[:n] {
			rt.Close()
		}
		t.Fatal(err)
	}
	return rts, append(gs, make([]*Group, len(rts)-n)...)
}

// createGroups has each of rts create, all at once, the group cfg
// describes (rank r on rts[r], of size founders), and returns what each
// NewGroup returned.
func createGroups(rts []*Runtime, size int, cfg GroupConfig) ([]*Group, []error) {
	gs := make([]*Group, len(rts))
	errs := make([]error, len(rts))
	var wg sync.WaitGroup
	for r := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			c.Rank, c.Size = r, size
			gs[r], errs[r] = rts[r].NewGroup(c)
		}()
	}
	wg.Wait()
	return gs, errs
}

// joinRanks creates, all at once, the group cfg describes on each of rts
// (rank r on rts[r], of len(rts) founders). On an error the groups it made
// are closed.
func joinRanks(rts []*Runtime, cfg GroupConfig) ([]*Group, error) {
	gs, errs := createGroups(rts, len(rts), cfg)
	for r, err := range errs {
		if err != nil {
			for _, g := range gs {
				if g != nil {
					g.Close()
				}
			}
			return nil, fmt.Errorf("rank %d: NewGroup %q: %w", r, cfg.GroupID, err)
		}
	}
	return gs, nil
}

// runAll runs fn on every rank of gs that is not nil, all at once, and
// waits for them, failing the test after limit.
func runAll(t *testing.T, gs []*Group, limit time.Duration, fn func(t *testing.T, r int, g *Group)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for r, g := range gs {
			if g == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn(t, r, g)
			}()
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("ranks did not finish within %v", limit)
	}
}

// ranks runs fn for every rank of a fresh group of n in-process ranks.
func ranks(t *testing.T, n, slot int, fn func(t *testing.T, g *Group)) {
	t.Helper()
	rts, gs := startRanks(t, n, NewRuntime, GroupConfig{GroupID: "test", Store: NewMemStore(), CollSlot: slot, P2PSlot: slot})
	defer func() {
		for r := range n {
			gs[r].Close()
			rts[r].Close()
		}
	}()
	runAll(t, gs, 120*time.Second, func(t *testing.T, _ int, g *Group) { fn(t, g) })
}

// must waits for an op and reports its error.
func must(t *testing.T, g *Group, what string, w *Work, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("rank %d: %s: %v", g.Rank(), what, err)
		return
	}
	if _, err := w.Wait(0); err != nil {
		t.Errorf("rank %d: %s: %v", g.Rank(), what, err)
	}
}

// input is rank r's deterministic input for a test case.
func input(dt DType, r, count, seed int) []byte {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(r)))
	return randomElems(rng, dt, count, false)
}

func bytesOf(r, n, seed int) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(r)+100))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

const testSlot = 4096 // small slots, so tests exercise chunking

func TestAllReduce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			seed := 0
			for _, dt := range allDTypes {
				for _, op := range allOps {
					if CheckReduction(dt, op) != nil {
						continue
					}
					// direct (small), several chunks, and odd counts
					for _, count := range []int{0, 1, 3, 100, 5*testSlot/dt.Size() + 7} {
						seed++
						ins := make([][]byte, n)
						for r := range n {
							ins[r] = input(dt, r, count, seed)
						}
						want := refReduce(dt, op, ins, count)
						buf := append([]byte(nil), ins[g.Rank()]...)
						w, err := g.AllReduce(buf, count, dt, op)
						must(t, g, fmt.Sprintf("all_reduce %v %v %d", dt, op, count), w, err)
						if !bytes.Equal(buf, want) {
							t.Errorf("rank %d: all_reduce %v %v count %d: wrong result", g.Rank(), dt, op, count)
						}
					}
				}
			}
		})
	}
}

func TestCollectivesMoveBytes(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			me := g.Rank()
			for seed, nb := range []int{0, 1, 17, testSlot, 3*testSlot + 5} {
				// broadcast from every root
				for root := range n {
					buf := bytesOf(me, nb, seed)
					w, err := g.Broadcast(buf, root)
					must(t, g, "broadcast", w, err)
					if !bytes.Equal(buf, bytesOf(root, nb, seed)) {
						t.Errorf("rank %d: broadcast root %d size %d wrong", me, root, nb)
					}
				}
				// all_gather
				outb := make([]byte, n*nb)
				w, err := g.AllGather(bytesOf(me, nb, seed), outb)
				must(t, g, "all_gather", w, err)
				for r := range n {
					if !bytes.Equal(outb[r*nb:(r+1)*nb], bytesOf(r, nb, seed)) {
						t.Errorf("rank %d: all_gather block %d wrong", me, r)
					}
				}
				// gather and scatter at every root
				for root := range n {
					var gout []byte
					if me == root {
						gout = make([]byte, n*nb)
					}
					w, err := g.Gather(bytesOf(me, nb, seed), gout, root)
					must(t, g, "gather", w, err)
					if me == root {
						for r := range n {
							if !bytes.Equal(gout[r*nb:(r+1)*nb], bytesOf(r, nb, seed)) {
								t.Errorf("rank %d: gather block %d wrong", me, r)
							}
						}
					}
					var sin []byte
					if me == root {
						sin = bytesOf(root, n*nb, seed+50)
					}
					sout := make([]byte, nb)
					w, err = g.Scatter(sin, sout, root)
					must(t, g, "scatter", w, err)
					if !bytes.Equal(sout, bytesOf(root, n*nb, seed+50)[me*nb:(me+1)*nb]) {
						t.Errorf("rank %d: scatter from %d wrong", me, root)
					}
				}
				w, err = g.Barrier()
				must(t, g, "barrier", w, err)
			}
		})
	}
}

// size of the all-to-all block from rank s to rank d (uneven, some empty).
func a2aSize(s, d, scale int) int { return ((s*7 + d*3) % 5) * scale }

// all_to_all on 1-8 ranks against the senders' bytes: uneven blocks, some
// empty, from one byte to more than a slot (several steps).
func TestAllToAll(t *testing.T) {
	for n := 1; n <= 8; n++ {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			me := g.Rank()
			for _, scale := range []int{1, 1000, testSlot + 3} {
				send, recv := make([]int, n), make([]int, n)
				var in []byte
				for d := range n {
					send[d] = a2aSize(me, d, scale)
					recv[d] = a2aSize(d, me, scale)
					in = append(in, bytesOf(me*100+d, send[d], scale)...)
				}
				tot := 0
				for _, v := range recv {
					tot += v
				}
				outb := make([]byte, tot)
				w, err := g.AllToAll(in, outb, send, recv)
				must(t, g, "all_to_all", w, err)
				at := 0
				for s := range n {
					if !bytes.Equal(outb[at:at+recv[s]], bytesOf(s*100+me, recv[s], scale)) {
						t.Errorf("rank %d: all_to_all block from %d wrong (scale %d)", me, s, scale)
					}
					at += recv[s]
				}
			}
		})
	}
}

func TestReduceAndReduceScatter(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		ranks(t, n, testSlot, func(t *testing.T, g *Group) {
			me := g.Rank()
			seed := 1000
			for _, dt := range []DType{Float32, Int64, BFloat16, Bool} {
				for _, op := range []ReduceOp{Sum, Max} {
					for _, count := range []int{0, 5, 3*testSlot/dt.Size() + 1} {
						seed++
						ins := make([][]byte, n)
						for r := range n {
							ins[r] = input(dt, r, count, seed)
						}
						want := refReduce(dt, op, ins, count)
						for root := range n {
							buf := append([]byte(nil), ins[me]...)
							w, err := g.Reduce(buf, count, dt, op, root)
							must(t, g, "reduce", w, err)
							if me == root && !bytes.Equal(buf, want) {
								t.Errorf("rank %d: reduce %v %v %d wrong", me, dt, op, count)
							}
							if me != root && !bytes.Equal(buf, ins[me]) {
								t.Errorf("rank %d: reduce changed a non-root buffer", me)
							}
						}
						// reduce_scatter: rank r's input is n blocks of count
						rsIn := make([][]byte, n)
						for r := range n {
							rsIn[r] = input(dt, r, n*count, seed+7)
						}
						es := dt.Size()
						blocks := make([][]byte, n)
						for r := range n {
							blocks[r] = rsIn[r][me*count*es : (me+1)*count*es]
						}
						wantRS := refReduce(dt, op, blocks, count)
						outb := make([]byte, count*es)
						w, err := g.ReduceScatter(rsIn[me], outb, count, dt, op)
						must(t, g, "reduce_scatter", w, err)
						if !bytes.Equal(outb, wantRS) {
							t.Errorf("rank %d: reduce_scatter %v %v %d wrong", me, dt, op, count)
						}
					}
				}
			}
		})
	}
}

func TestSendRecvFIFOAndAsync(t *testing.T) {
	ranks(t, 3, testSlot, func(t *testing.T, g *Group) {
		me := g.Rank()
		n := g.Size()
		// Every rank sends 5 messages to every other rank and receives 5
		// from each, all posted at once (a ring of big sends would deadlock
		// if sends and receives shared one queue).
		type pending struct {
			w    *Work
			buf  []byte
			want []byte
		}
		var ps []pending
		for k := range 5 {
			for p := range n {
				if p == me {
					continue
				}
				size := (k*1237 + p*11) % (3 * testSlot)
				w, err := g.Send(bytesOf(me*10+p, size, k), p)
				if err != nil {
					t.Error(err)
					return
				}
				ps = append(ps, pending{w: w})
				rsize := (k*1237 + me*11) % (3 * testSlot)
				buf := make([]byte, rsize)
				w, err = g.Recv(buf, p)
				if err != nil {
					t.Error(err)
					return
				}
				ps = append(ps, pending{w: w, buf: buf, want: bytesOf(p*10+me, rsize, k)})
			}
		}
		// A collective in the middle of point-to-point traffic.
		x := make([]byte, 8)
		binary.LittleEndian.PutUint64(x, math.Float64bits(float64(me+1)))
		w, err := g.AllReduce(x, 1, Float64, Sum)
		must(t, g, "all_reduce", w, err)
		if got := math.Float64frombits(binary.LittleEndian.Uint64(x)); got != float64(n*(n+1)/2) {
			t.Errorf("all_reduce among sends: %v", got)
		}
		for _, p := range ps {
			if _, err := p.w.Wait(0); err != nil {
				t.Errorf("rank %d: p2p: %v", me, err)
			}
			if p.buf != nil && !bytes.Equal(p.buf, p.want) {
				t.Errorf("rank %d: p2p message out of order or corrupt", me)
			}
		}
	})
}

func TestInvalidRequestsLeaveGroupUsable(t *testing.T) {
	ranks(t, 2, testSlot, func(t *testing.T, g *Group) {
		bad := []func() (*Work, error){
			func() (*Work, error) { return g.AllReduce(make([]byte, 4), 4, Float32, Sum) },
			func() (*Work, error) { return g.AllReduce(make([]byte, 8), 4, DType(27), Sum) },
			func() (*Work, error) { return g.AllReduce(make([]byte, 8), 2, Float32, ReduceOp(5)) },
			func() (*Work, error) { return g.Broadcast(nil, 2) },
			func() (*Work, error) { return g.AllGather(make([]byte, 4), make([]byte, 6)) },
			func() (*Work, error) { return g.AllToAll(nil, nil, []int{0}, []int{0}) },
			func() (*Work, error) { return g.Send(nil, g.Rank()) },
		}
		for i, f := range bad {
			if w, err := f(); !errors.Is(err, ErrInvalid) || w != nil {
				t.Errorf("bad request %d: got %v, want ErrInvalid", i, err)
			}
		}
		x := []byte{1}
		w, err := g.AllReduce(x, 1, Uint8, Sum)
		must(t, g, "all_reduce after invalid requests", w, err)
		if x[0] != 2 {
			t.Errorf("all_reduce after invalid requests = %d", x[0])
		}
	})
}

func TestDefaultSlotsLargeAllReduceOverTCP(t *testing.T) {
	t.Setenv("MC_FORCE_TCP", "true")
	ranks(t, 2, 0, func(t *testing.T, g *Group) {
		count := g.SlotBytes()/4*3 + 5 // bigger than the staging slots
		buf := make([]byte, count*4)
		for i := range count {
			binary.LittleEndian.PutUint32(buf[i*4:], math.Float32bits(float32(i%1000+g.Rank())))
		}
		w, err := g.AllReduce(buf, count, Float32, Sum)
		must(t, g, "all_reduce", w, err)
		for i := range count {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(buf[i*4:])); got != float32(2*(i%1000)+1) {
				t.Errorf("rank %d: element %d = %v", g.Rank(), i, got)
				return
			}
		}
	})
}

func TestRejoinSameGroupID(t *testing.T) {
	store := NewMemStore()
	rts := []*Runtime{NewRuntime(), NewRuntime()}
	defer rts[0].Close()
	defer rts[1].Close()
	for round := range 3 {
		gs := make([]*Group, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := rts[r].NewGroup(GroupConfig{Rank: r, Size: 2, GroupID: "0", Store: store})
				if err != nil {
					t.Errorf("round %d rank %d: %v", round, r, err)
					return
				}
				gs[r] = g
				x := []byte{byte(r + round)}
				w, err := g.AllReduce(x, 1, Uint8, Sum)
				must(t, g, "all_reduce", w, err)
				if x[0] != byte(1+2*round) {
					t.Errorf("round %d: got %d", round, x[0])
				}
			}()
		}
		wg.Wait()
		for _, g := range gs {
			if g != nil {
				g.Close()
			}
		}
	}
}

// Inline ops run on the caller when the queue is idle and are queued
// behind pending ops otherwise; either way results and order are right.
func TestInlineAndQueuedOpsKeepOrder(t *testing.T) {
	ranks(t, 2, testSlot, func(t *testing.T, g *Group) {
		var works []*Work
		var bufs [][]byte
		for k := range 20 {
			b := []byte{byte(k), byte(g.Rank())}
			var opts []OpOption
			if k%3 != 0 {
				opts = append(opts, Inline())
			}
			w, err := g.AllReduce(b, 2, Uint8, Sum, opts...)
			if err != nil {
				t.Error(err)
				return
			}
			works, bufs = append(works, w), append(bufs, b)
		}
		for k, w := range works {
			if _, err := w.Wait(0); err != nil {
				t.Errorf("op %d: %v", k, err)
			}
			if bufs[k][0] != byte(2*k) || bufs[k][1] != 1 {
				t.Errorf("op %d: got %v", k, bufs[k])
			}
		}
		w, err := g.Barrier(Inline())
		must(t, g, "inline barrier", w, err)
		if !w.Completed() {
			t.Error("inline op on an idle queue did not complete before returning")
		}
	})
}

// A wait on a peer that is gone ends at the deadline (the liveness probe
// fails); the op completes without an error, marks the peer failed, and
// its result covers the survivor only; the group goes on without it.
func TestWaitOnDeadPeerFailsAtDeadline(t *testing.T) {
	store := NewMemStore()
	rts := []*Runtime{NewRuntime(), NewRuntime()}
	defer rts[0].Close()
	gs := make([]*Group, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if gs[r], err = rts[r].NewGroup(GroupConfig{Rank: r, Size: 2, GroupID: "dead", Store: store}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	defer gs[0].Close()
	if err := rts[0].SetCollectiveTimeout(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	buf := f32bytes(3)
	w, err := gs[0].AllReduce(buf, 1, Float32, Sum)
	if err != nil {
		t.Fatal(err)
	}
	gs[1].Close() // rank 1 never joins the op, and goes away
	rts[1].Close()
	ok, err := w.Wait(time.Minute)
	if !ok {
		t.Fatal("all_reduce with a dead peer still waiting after a minute")
	}
	if err != nil || w.LocalSuccess() || fmt.Sprint(w.FailedRanks()) != "[1]" {
		t.Fatalf("all_reduce with a dead peer: err %v, local success %v, failed %v; want nil, false, [1]",
			err, w.LocalSuccess(), w.FailedRanks())
	}
	if !bytes.Equal(buf, f32bytes(3)) {
		t.Fatalf("all_reduce over the survivor: %v", buf)
	}
	if v := gs[0].View(); v.Epoch != 1 || fmt.Sprint(v.Active) != "[true false]" {
		t.Fatalf("view after the failure: %+v", v)
	}
	w, err = gs[0].Barrier()
	must(t, gs[0], "barrier after the failure", w, err)
	if !w.LocalSuccess() {
		t.Fatal("barrier among survivors reported a failure")
	}
}

// Over TCP, broadcast among three ranks pulls with Transfer Engine READs.
func TestBroadcastPullOverTCP(t *testing.T) {
	t.Setenv("MC_FORCE_TCP", "true")
	ranks(t, 3, testSlot, func(t *testing.T, g *Group) {
		for root := range 3 {
			buf := bytesOf(g.Rank(), 5*testSlot+3, root)
			runColl(t, g, "pull broadcast", func() error { return broadcastPull(g, buf, root) })
			if !bytes.Equal(buf, bytesOf(root, 5*testSlot+3, root)) {
				t.Errorf("rank %d: broadcast from %d over TCP wrong", g.Rank(), root)
			}
		}
	})
}
