package backend

import (
	"runtime"
	"testing"
	"time"
)

// A small collective run inline allocates its Work and its op closure
// (which the queue would keep, had the op not run inline), and nothing on
// its way through the push path (messages, flags, the puts, sources,
// views): two allocations per rank per op (four for all_to_all, which
// keeps copies of its sizes). The count is the
// process's, taken over many ops, so the rare allocation of a background
// goroutine (the coordinator's watch) fits in the slack.
func TestSmallOpsAllocateOnlyTheirWork(t *testing.T) {
	const n, ops = 2, 400
	// The coordinator probe's pings (a gRPC call every 200 ms per rank)
	// would count as allocations of whichever op they overlap.
	quiet := func() *Runtime {
		rt := NewRuntime()
		rt.coordProbe = 0
		return rt
	}
	rts, gs := startRanks(t, n, quiet, GroupConfig{GroupID: "allocs", Store: NewMemStore()})
	defer func() {
		for r := range n {
			gs[r].Close()
			rts[r].Close()
		}
	}()
	cases := []struct {
		name  string
		perOp float64 // allocations per rank per op
		run   func(g *Group, buf, out []byte) (*Work, error)
	}{
		{"all_reduce", 2, func(g *Group, buf, _ []byte) (*Work, error) {
			return g.AllReduce(buf[:8], 2, Float32, Sum, Inline())
		}},
		{"broadcast", 2, func(g *Group, buf, _ []byte) (*Work, error) { return g.Broadcast(buf[:8], 0, Inline()) }},
		{"barrier", 2, func(g *Group, _, _ []byte) (*Work, error) { return g.Barrier(Inline()) }},
		{"all_gather", 2, func(g *Group, buf, out []byte) (*Work, error) { return g.AllGather(buf[:8], out[:16], Inline()) }},
		{"reduce_scatter", 2, func(g *Group, buf, out []byte) (*Work, error) {
			return g.ReduceScatter(buf[:16], out[:8], 2, Float32, Sum, Inline())
		}},
		{"all_to_all", 4, func(g *Group, buf, out []byte) (*Work, error) {
			return g.AllToAll(buf[:16], out[:16], []int{8, 8}, []int{8, 8}, Inline())
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			loop := func(count int) {
				runAll(t, gs[:n], time.Minute, func(t *testing.T, r int, g *Group) {
					buf, out := make([]byte, 16), make([]byte, 16)
					for range count {
						w, err := c.run(g, buf, out)
						if err == nil {
							_, err = w.Wait(0)
						}
						if err == nil && !w.LocalSuccess() {
							t.Errorf("rank %d: failed ranks %v", r, w.FailedRanks())
						}
						if err != nil {
							t.Errorf("rank %d: %v", r, err)
							return
						}
					}
				})
			}
			loop(20) // warm: first views, first mappings
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			loop(ops)
			runtime.ReadMemStats(&after)
			// runAll's own goroutines and channel: a few per loop.
			got := float64(after.Mallocs-before.Mallocs) / float64(n*ops)
			t.Logf("%.2f allocations per rank per op", got)
			if got > c.perOp+0.5 {
				t.Errorf("%.2f allocations per rank per op, want at most %v", got, c.perOp)
			}
		})
	}
}
