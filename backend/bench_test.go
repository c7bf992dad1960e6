package backend

import (
	"fmt"
	"sync"
	"testing"
)

// BenchmarkAllReduce runs all_reduce among in-process ranks (each with its
// own engine; shm transport). Speed is reported, never asserted; the ranks
// share this process's CPUs and garbage collector, so benchmarks/
// coll_profile.py (ranks as processes, through torch) is the guide to a
// small op's time.
func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range []int{8, 64 << 10, 1 << 20, 4 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%d", n, size), func(b *testing.B) {
				store := NewMemStore()
				gs := make([]*Group, n)
				var wg sync.WaitGroup
				for r := range n {
					rt := NewRuntime()
					defer rt.Close()
					wg.Add(1)
					go func() {
						defer wg.Done()
						g, err := rt.NewGroup(GroupConfig{Rank: r, Size: n, GroupID: "bench", Store: store})
						if err != nil {
							b.Error(err)
						}
						gs[r] = g
					}()
				}
				wg.Wait()
				if b.Failed() {
					return
				}
				bufs := make([][]byte, n)
				for r := range n {
					bufs[r] = make([]byte, size)
					defer gs[r].Close()
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				// Each rank runs its ops back to back on its own
				// goroutine, inline, as a torch caller that waits for
				// each op does.
				for r := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range b.N {
							w, err := gs[r].AllReduce(bufs[r], size/4, Float32, Sum, Inline())
							if err == nil {
								_, err = w.Wait(0)
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}

// BenchmarkBroadcast compares the push and pull broadcasts.
func BenchmarkBroadcast(b *testing.B) {
	for _, algo := range []struct {
		name string
		fn   broadcastFn
	}{{"push", broadcastOneToAll}, {"pull", broadcastPull}} {
		for _, n := range []int{4} {
			size := 64 << 20
			b.Run(fmt.Sprintf("%s/ranks=%d/bytes=%d", algo.name, n, size), func(b *testing.B) {
				store := NewMemStore()
				gs := make([]*Group, n)
				var wg sync.WaitGroup
				for r := range n {
					rt := NewRuntime()
					defer rt.Close()
					wg.Add(1)
					go func() {
						defer wg.Done()
						g, err := rt.NewGroup(GroupConfig{Rank: r, Size: n, GroupID: "bench", Store: store})
						if err != nil {
							b.Error(err)
						}
						gs[r] = g
					}()
				}
				wg.Wait()
				bufs := make([][]byte, n)
				for r := range n {
					bufs[r] = make([]byte, size)
					defer gs[r].Close()
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					var wg sync.WaitGroup
					for r := range n {
						wg.Add(1)
						go func() {
							defer wg.Done()
							g := gs[r]
							w, err := g.start(g.coll, func() error { return algo.fn(g, bufs[r], 0) }, nil)
							if err == nil {
								_, err = w.Wait(0)
							}
							if err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
				}
			})
		}
	}
}
