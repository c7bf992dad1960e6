package backend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// specialF32 are the values where vector and scalar min/max could differ.
var specialF32 = []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1, -1, math.MaxFloat32, math.SmallestNonzeroFloat32}

func fillF32(rng *rand.Rand, s []float32) {
	for i := range s {
		if rng.IntN(4) == 0 {
			s[i] = specialF32[rng.IntN(len(specialF32))]
		} else {
			s[i] = float32(rng.NormFloat64() * 3)
		}
	}
}

func fillF64(rng *rand.Rand, s []float64) {
	for i := range s {
		if rng.IntN(4) == 0 {
			s[i] = float64(specialF32[rng.IntN(len(specialF32))])
		} else {
			s[i] = rng.NormFloat64() * 3
		}
	}
}

// checkVecReduce compares the fused kernel (through reduceF32/F64, so
// with its tail) with foldTail over the whole range, bit for bit (any NaN
// equals any NaN: which input NaN survives depends on operand order the
// compiler is free to pick for x*y and x+y), for
// every op, at the given offset into the sources (unaligned starts), with
// dst separate (and a second output) and dst being each source in turn.
func checkVecReduce[T float](t *testing.T, nsrc, count, off int, fill func(*rand.Rand, []T), reduce func(dst, also []T, srcs [][]T, op ReduceOp), bits func(T) uint64) {
	rng := rand.New(rand.NewPCG(uint64(nsrc), uint64(count+off)))
	srcs := make([][]T, nsrc)
	for i := range srcs {
		s := make([]T, count+off)
		fill(rng, s)
		srcs[i] = s[off:]
	}
	for _, op := range []ReduceOp{Sum, Avg, Product, Min, Max} {
		want := make([]T, count)
		foldTail(want, nil, srcs, op, 0)
		got, also := make([]T, count), make([]T, count+off)[off:]
		reduce(got, also, srcs, op)
		check := func(what string, got []T) {
			for i := range want {
				if bits(got[i]) != bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("%T %v nsrc=%d count=%d off=%d %s: element %d = %v, want %v (inputs %v)", got[0], op, nsrc, count, off, what, i, got[i], want[i], column(srcs, i))
				}
			}
		}
		check("dst", got)
		check("second output", also)
		for k := range nsrc { // in place into source k
			in := append([][]T(nil), srcs...)
			in[k] = append([]T(nil), srcs[k]...)
			reduce(in[k], nil, in, op)
			check(fmt.Sprintf("in place of source %d", k), in[k])
		}
	}
}

func column[T float](srcs [][]T, i int) []T {
	c := make([]T, len(srcs))
	for k, s := range srcs {
		c[k] = s[i]
	}
	return c
}

func TestVecReduceMatchesScalar(t *testing.T) {
	if !fusedFloats {
		t.Skip("no vector kernels on this CPU")
	}
	f32bits := func(v float32) uint64 { return uint64(math.Float32bits(v)) }
	for _, nsrc := range []int{1, 2, 3, 4, 5, 8, 9} {
		// the last count takes several kernel calls (vecCall) for both widths
		for _, count := range []int{1, 7, 31, 32, 33, 64, 100, 1000, 4099, 3*vecCall/4 + 37} {
			for _, off := range []int{0, 1, 3} {
				checkVecReduce(t, nsrc, count, off, fillF32, reduceF32, f32bits)
				checkVecReduce(t, nsrc, count, off, fillF64, reduceF64, math.Float64bits)
			}
		}
	}
}

// TestVecReduceNaN pins the NaN rule: MIN and MAX return NaN when any
// input is NaN, wherever it is, as torch does.
func TestVecReduceNaN(t *testing.T) {
	nan := float32(math.NaN())
	for _, op := range []ReduceOp{Min, Max} {
		for pos := range 3 {
			srcs := make([][]float32, 3)
			for k := range srcs {
				srcs[k] = make([]float32, 64)
				for i := range srcs[k] {
					srcs[k][i] = float32(k + i)
				}
			}
			srcs[pos][5] = nan
			dst := make([]float32, 64)
			reduceF32(dst, nil, srcs, op)
			if !math.IsNaN(float64(dst[5])) {
				t.Fatalf("%v with NaN in source %d: %v", op, pos, dst[5])
			}
			if dst[4] != float32(map[ReduceOp]int{Min: 4, Max: 6}[op]) {
				t.Fatalf("%v: %v", op, dst[4])
			}
		}
	}
}

// BenchmarkReduceKernel measures the float32 SUM kernels beside copy() on
// the same sizes; the rate is output bytes per second. "blocked" is the
// portable code (copy, then gonum's axpy per extra source).
func BenchmarkReduceKernel(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		for _, nsrc := range []int{2, 4} {
			count := size / 4
			srcs := make([][]float32, nsrc)
			for i := range srcs {
				srcs[i] = make([]float32, count)
				for j := range srcs[i] {
					srcs[i][j] = float32(i + j)
				}
			}
			dst, also := make([]float32, count), make([]float32, count)
			run := func(name string, f func()) {
				b.Run(fmt.Sprintf("%s/bytes=%d/srcs=%d", name, size, nsrc), func(b *testing.B) {
					b.SetBytes(int64(size))
					for range b.N {
						f()
					}
				})
			}
			run("fused", func() { reduceF32(dst, nil, srcs, Sum) })
			run("fused-also", func() { reduceF32(dst, also, srcs, Sum) })
			run("blocked", func() { reduceBlocks(dst, srcs, Sum, addF32) })
		}
		src, dst := make([]byte, size), make([]byte, size)
		b.Run(fmt.Sprintf("copy/bytes=%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			for range b.N {
				copy(dst, src)
			}
		})
	}
}
