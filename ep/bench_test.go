package ep

import (
	"math/rand"
	"sync"
	"testing"
)

// BenchmarkDispatchCombine: 2 in-process ranks over shm, T=N=128, K=8,
// H=2048, E=64 (bf16). Reported per dispatch+combine on every rank.
func BenchmarkDispatchCombine(b *testing.B) { benchDC(b, false) }

// BenchmarkDispatchCombineFP8: the same with FP8 dispatch.
func BenchmarkDispatchCombineFP8(b *testing.B) { benchDC(b, true) }

func benchDC(b *testing.B, fp8 bool) {
	const R, N, H, E, K = 2, 128, 2048, 64, 8
	t := &testing.T{}
	bufs := group(t, R, SizeHint(N, H, R, E), false)
	rng := rand.New(rand.NewSource(1))
	in := makeInputs(rng, R, N, H, E, K)
	for i := range in { // full T = N
		in[i] = makeInputs(rng, 1, N, H, E, K)[0]
	}
	args := make([]DispatchArgs, R)
	comb := make([]CombineArgs, R)
	for i := range args {
		act := []int32{1, 1}
		args[i] = newDispatch(in[i], R, N, H, E, K, fp8, act, -1)
		comb[i] = CombineArgs{X: make([]uint16, E/R*R*N*H), TopkIdx: in[i].idx, Weights: in[i].w, T: in[i].t, K: K, N: N, H: H, E: E,
			Active: act, TimeoutUs: -1, SrcInfo: args[i].SrcInfo, LayoutRange: args[i].LayoutRange, Out: make([]uint16, in[i].t*H)}
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		var wg sync.WaitGroup
		for i := range bufs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if err := bufs[i].Dispatch(&args[i]); err != nil {
					b.Error(err)
				}
				if err := bufs[i].Combine(&comb[i]); err != nil {
					b.Error(err)
				}
			}(i)
		}
		wg.Wait()
	}
}
