package ep

import (
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/mooncake-go/mooncake/internal/half"
	"github.com/mooncake-go/mooncake/transfer"
)

// group is R in-process ranks, each with its own engine and EP buffer,
// connected over shm (or TCP when forceTCP).
func group(t *testing.T, r int, bytes int64, forceTCP bool) []*Buffer {
	t.Helper()
	bufs := make([]*Buffer, r)
	peers := make([]Peer, r)
	for i := range bufs {
		e, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE", ForceTCP: forceTCP})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		b, err := NewBuffer(Config{Rank: i, Ranks: r, Bytes: bytes, Engine: e})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		bufs[i], peers[i] = b, b.Self()
	}
	for _, b := range bufs {
		if err := b.Connect(peers); err != nil {
			t.Fatal(err)
		}
	}
	return bufs
}

type rankIn struct {
	x   []uint16
	idx []int64
	w   []float32
	t   int
}

func makeInputs(rng *rand.Rand, r, n, h, e, k int) []rankIn {
	in := make([]rankIn, r)
	for i := range in {
		t := n - i // different T per rank
		x := make([]uint16, t*h)
		for j := range x {
			x[j] = half.F32ToBF16(float32(rng.NormFloat64()))
		}
		idx := make([]int64, t*k)
		w := make([]float32, t*k)
		for tok := 0; tok < t; tok++ {
			perm := rng.Perm(e)
			for kk := 0; kk < k; kk++ {
				idx[tok*k+kk] = int64(perm[kk])
				w[tok*k+kk] = float32(rng.Float64())
			}
		}
		idx[rng.Intn(len(idx))] = -1
		in[i] = rankIn{x, idx, w, t}
	}
	return in
}

type rankOut struct {
	d DispatchArgs
	c CombineArgs
}

func newDispatch(in rankIn, r, n, h, e, k int, fp8 bool, active []int32, timeoutUs int64) DispatchArgs {
	L := e / r
	elem := 2
	if fp8 {
		elem = 1
	}
	a := DispatchArgs{X: in.x, TopkIdx: in.idx, T: in.t, K: k, N: n, H: h, E: e, Active: active, TimeoutUs: timeoutUs, FP8: fp8,
		RecvX: make([]byte, L*r*n*h*elem), RecvCount: make([]int32, L), SrcInfo: make([]int32, L*r*n), LayoutRange: make([]int64, L*r)}
	if fp8 {
		a.RecvScales = make([]float32, L*r*n*h/128)
	}
	return a
}

// identityExperts turns the dispatch output into combine input: y = x
// (dequantised for FP8, then rounded to bf16).
func identityExperts(a *DispatchArgs, r int) []uint16 {
	L, RN, H := a.E/r, r*a.N, a.H
	y := make([]uint16, L*RN*H)
	G := H / 128
	for le := 0; le < L; le++ {
		for i := 0; i < int(a.RecvCount[le]); i++ {
			row := le*RN + i
			for c := 0; c < H; c++ {
				if a.FP8 {
					y[row*H+c] = half.F32ToBF16(e4m3ToF32(a.RecvX[row*H+c]) * a.RecvScales[(le*G+c/128)*RN+i])
				} else {
					y[row*H+c] = uint16(a.RecvX[2*(row*H+c)]) | uint16(a.RecvX[2*(row*H+c)+1])<<8
				}
			}
		}
	}
	return y
}

// checkDispatch verifies counts, block structure, source indices and
// payloads of rank me against the inputs of every alive rank.
func checkDispatch(t *testing.T, me int, a *DispatchArgs, in []rankIn, alive []bool) {
	t.Helper()
	R := len(in)
	L, RN, H := a.E/R, R*a.N, a.H
	for le := 0; le < L; le++ {
		ge := int64(me*L + le)
		total := 0
		next := 0
		for src := 0; src < R; src++ {
			want := 0
			var toks []int
			if alive[src] {
				for i, v := range in[src].idx {
					if v == ge {
						want++
						toks = append(toks, i/a.K)
					}
				}
			}
			lr := a.LayoutRange[le*R+src]
			begin, n := int(lr>>32), int(lr&0xffffffff)
			if n != want {
				t.Fatalf("rank %d le %d src %d: count %d, want %d", me, le, src, n, want)
			}
			if n > 0 && begin != next {
				t.Fatalf("rank %d le %d src %d: begin %d, want %d", me, le, src, begin, next)
			}
			next += n
			for m := 0; m < n; m++ {
				row := le*RN + begin + m
				tok := int(a.SrcInfo[row])
				if tok != toks[m] {
					t.Fatalf("src_info %d, want %d", tok, toks[m])
				}
				for c := 0; c < H; c++ {
					want := half.BF16ToF32(in[src].x[tok*H+c])
					var got float32
					if a.FP8 {
						got = e4m3ToF32(a.RecvX[row*H+c]) * a.RecvScales[(le*(H/128)+c/128)*RN+begin+m]
						if math.Abs(float64(got-want)) > 0.07*math.Abs(float64(want))+1e-3 {
							t.Fatalf("fp8 value %g, want %g", got, want)
						}
					} else {
						got = half.BF16ToF32(uint16(a.RecvX[2*(row*H+c)]) | uint16(a.RecvX[2*(row*H+c)+1])<<8)
						if got != want {
							t.Fatalf("value %g, want %g", got, want)
						}
					}
				}
			}
			total += n
		}
		if int(a.RecvCount[le]) != total {
			t.Fatalf("recv_count %d, want %d", a.RecvCount[le], total)
		}
		if total < RN && a.SrcInfo[le*RN+total] != -1 {
			t.Fatal("src_info past the count is not -1")
		}
	}
}

// checkCombine: identity experts give out[t] = sum over alive owners of
// w * x[t] (bf16 dispatch: exact, same k order).
func checkCombine(t *testing.T, me int, c *CombineArgs, in rankIn, alive []bool, fp8 bool) {
	t.Helper()
	L := c.E / len(alive)
	acc := make([]float32, c.H)
	for tok := 0; tok < in.t; tok++ {
		clear(acc)
		for k := 0; k < c.K; k++ {
			e := in.idx[tok*c.K+k]
			if e < 0 || !alive[int(e)/L] {
				continue
			}
			for i := range acc {
				acc[i] += in.w[tok*c.K+k] * half.BF16ToF32(in.x[tok*c.H+i])
			}
		}
		for i := range acc {
			got := half.BF16ToF32(c.Out[tok*c.H+i])
			want := half.BF16ToF32(half.F32ToBF16(acc[i]))
			if fp8 {
				if math.Abs(float64(got-want)) > 0.1*math.Abs(float64(want))+0.05 {
					t.Fatalf("rank %d tok %d ch %d: %g, want %g", me, tok, i, got, want)
				}
			} else if got != want {
				t.Fatalf("rank %d tok %d ch %d: %g, want %g", me, tok, i, got, want)
			}
		}
	}
}

func runRound(t *testing.T, bufs []*Buffer, in []rankIn, n, h, e, k int, fp8, hook bool, alive []bool, timeoutUs int64) {
	R := len(in)
	outs := make([]rankOut, R)
	var wg sync.WaitGroup
	errs := make([]error, R)
	for i := range bufs {
		if !alive[i] {
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			b := bufs[i]
			act := make([]int32, R)
			for j := range act {
				act[j] = 1
			}
			outs[i].d = newDispatch(in[i], R, n, h, e, k, fp8, act, timeoutUs)
			d := &outs[i].d
			if hook {
				op, err := b.DispatchSend(d)
				if err != nil {
					errs[i] = err
					return
				}
				op.Recv()
			} else if errs[i] = b.Dispatch(d); errs[i] != nil {
				return
			}
			outs[i].c = CombineArgs{X: identityExperts(d, R), TopkIdx: in[i].idx, Weights: in[i].w, T: in[i].t, K: k, N: n, H: h, E: e,
				Active: act, TimeoutUs: timeoutUs, SrcInfo: d.SrcInfo, LayoutRange: d.LayoutRange, Out: make([]uint16, in[i].t*h)}
			errs[i] = b.Combine(&outs[i].c)
		}(i)
	}
	wg.Wait()
	for i := range bufs {
		if !alive[i] {
			continue
		}
		if errs[i] != nil {
			t.Fatalf("rank %d: %v", i, errs[i])
		}
		for j, a := range outs[i].d.Active {
			if (a != 0) != alive[j] {
				t.Fatalf("rank %d sees active[%d]=%d", i, j, a)
			}
		}
		checkDispatch(t, i, &outs[i].d, in, alive)
		checkCombine(t, i, &outs[i].c, in[i], alive, fp8)
	}
}

func TestDispatchCombine(t *testing.T) {
	const R, N, H, E, K = 4, 12, 256, 8, 3
	for _, tcp := range []bool{false, true} {
		name := "shm"
		if tcp {
			name = "tcp"
		}
		t.Run(name, func(t *testing.T) {
			bufs := group(t, R, SizeHint(N, H, R, E), tcp)
			rng := rand.New(rand.NewSource(7))
			all := []bool{true, true, true, true}
			for round := 0; round < 3; round++ { // both halves, twice
				in := makeInputs(rng, R, N, H, E, K)
				runRound(t, bufs, in, N, H, E, K, round == 1, round == 2, all, 10_000_000)
			}
		})
	}
}

func TestDeadRankIsDropped(t *testing.T) {
	const R, N, H, E, K = 4, 8, 128, 8, 2
	bufs := group(t, R, SizeHint(N, H, R, E), false)
	rng := rand.New(rand.NewSource(3))
	alive := []bool{true, true, false, true}
	runRound(t, bufs, makeInputs(rng, R, N, H, E, K), N, H, E, K, false, false, alive, 300_000)
}

func TestPreconditions(t *testing.T) {
	bufs := group(t, 2, SizeHint(4, 128, 2, 4), false)
	b := bufs[0]
	act := []int32{1, 1}
	in := rankIn{x: make([]uint16, 5*128), idx: make([]int64, 5*2), t: 5}
	a := newDispatch(in, 2, 4, 128, 4, 2, false, act, 0)
	if _, err := b.DispatchSend(&a); err == nil {
		t.Fatal("T > N accepted")
	}
	in = rankIn{x: make([]uint16, 2*128), idx: []int64{0, 9, 1, 2}, t: 2}
	a = newDispatch(in, 2, 4, 128, 4, 2, false, act, 0)
	if _, err := b.DispatchSend(&a); err == nil {
		t.Fatal("expert out of range accepted")
	}
	in = rankIn{x: make([]uint16, 2*256), idx: []int64{0, 1, 1, 2}, t: 2}
	a = newDispatch(in, 2, 4, 256, 4, 2, false, act, 0)
	if _, err := b.DispatchSend(&a); err == nil {
		t.Fatal("buffer too small accepted")
	}
	if SizeHint(128, 7168, 8, 288) != 2118652416 || SizeHint(256, 2048, 8, 288) != 1217401344 || SizeHint(1024, 7168, 8, 256) != 15065944064 {
		t.Fatal("size hint differs from upstream's worked values")
	}
}

// Two calls outstanding: every rank sends two dispatches, then completes
// both receives in order (hook mode), then two combines asynchronously.
func TestTwoOutstanding(t *testing.T) {
	const R, N, H, E, K = 3, 6, 128, 6, 2
	bufs := group(t, R, SizeHint(N, H, R, E), false)
	rng := rand.New(rand.NewSource(11))
	inA, inB := makeInputs(rng, R, N, H, E, K), makeInputs(rng, R, N, H, E, K)
	all := []bool{true, true, true}
	var wg sync.WaitGroup
	res := make([][2]rankOut, R)
	for i := range bufs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			b := bufs[i]
			act := []int32{1, 1, 1}
			for j, in := range []rankIn{inA[i], inB[i]} {
				res[i][j].d = newDispatch(in, R, N, H, E, K, false, act, 5_000_000)
			}
			opA, err := b.DispatchSend(&res[i][0].d)
			if err != nil {
				t.Error(err)
				return
			}
			opB, err := b.DispatchSend(&res[i][1].d)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := b.DispatchSend(&res[i][0].d); err == nil {
				t.Error("a third outstanding call was accepted")
			}
			if err := opB.Recv(); err == nil {
				t.Error("out-of-order receive accepted")
			}
			opA.Recv()
			opB.Recv()
			var ops []*Op
			for j, in := range []rankIn{inA[i], inB[i]} {
				d := &res[i][j].d
				res[i][j].c = CombineArgs{X: identityExperts(d, R), TopkIdx: in.idx, Weights: in.w, T: in.t, K: K, N: N, H: H, E: E,
					Active: act, TimeoutUs: 5_000_000, SrcInfo: d.SrcInfo, LayoutRange: d.LayoutRange, Out: make([]uint16, in.t*H)}
				op, err := b.CombineSend(&res[i][j].c)
				if err != nil {
					t.Error(err)
					return
				}
				op.RecvAsync()
				ops = append(ops, op)
			}
			for _, op := range ops {
				op.Wait()
			}
		}(i)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := range bufs {
		for j, in := range [][]rankIn{inA, inB} {
			checkDispatch(t, i, &res[i][j].d, in, all)
			checkCombine(t, i, &res[i][j].c, in[i], all, false)
		}
	}
}

// Asymmetric view: rank 0 considers rank 1 dead, the others do not. Rank 0
// neither reads nor writes rank 1, so rank 1 times out on rank 0 and drops
// it in turn: the two fence each other; rank 2 keeps both. Several rounds,
// the halves' parity shifted by an extra dispatch, with the unread signals
// left behind never mistaken for fresh ones.
func TestAsymmetricMask(t *testing.T) {
	const R, N, H, E, K = 3, 6, 128, 6, 2
	bufs := group(t, R, SizeHint(N, H, R, E), false)
	rng := rand.New(rand.NewSource(21))
	acts := [][]int32{{1, 0, 1}, {1, 1, 1}, {1, 1, 1}}
	alive := [][]bool{{true, false, true}, {false, true, true}, {true, true, true}}
	// Rank 1 waits out rank 0 (1 s); the others must outwait rank 1 doing so.
	timeouts := []int64{20_000_000, 1_000_000, 20_000_000}
	for round := 0; round < 4; round++ {
		in := makeInputs(rng, R, N, H, E, K)
		out := make([]rankOut, R)
		var wg sync.WaitGroup
		for i := range bufs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				out[i].d = newDispatch(in[i], R, N, H, E, K, false, acts[i], timeouts[i])
				if err := bufs[i].Dispatch(&out[i].d); err != nil {
					t.Error(err)
					return
				}
				if round == 1 { // an extra dispatch shifts the halves' parity
					extra := newDispatch(in[i], R, N, H, E, K, false, acts[i], timeouts[i])
					if err := bufs[i].Dispatch(&extra); err != nil {
						t.Error(err)
						return
					}
				}
				d := &out[i].d
				out[i].c = CombineArgs{X: identityExperts(d, R), TopkIdx: in[i].idx, Weights: in[i].w, T: in[i].t, K: K, N: N, H: H, E: E,
					Active: acts[i], TimeoutUs: timeouts[i], SrcInfo: d.SrcInfo, LayoutRange: d.LayoutRange, Out: make([]uint16, in[i].t*H)}
				if err := bufs[i].Combine(&out[i].c); err != nil {
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for i := range bufs {
			for j := range alive[i] {
				if (acts[i][j] != 0) != alive[i][j] {
					t.Fatalf("round %d rank %d: active %v", round, i, acts[i])
				}
			}
			checkDispatch(t, i, &out[i].d, in, alive[i])
			checkCombine(t, i, &out[i].c, in[i], alive[i], false)
		}
	}
}
