package ep

import (
	"math"
	"math/rand"
	"testing"
)

// TestCastE4M3AVX2MatchesGo: the AVX2 kernel gives castE4M3Go's byte for
// every bf16 bit pattern (NaNs, infinities, subnormal and saturating
// results included) at scales from tiny to huge, and a tail shorter than
// a vector is right too.
func TestCastE4M3AVX2MatchesGo(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	x := make([]uint16, 1<<16+13) // every pattern, then a 13-value tail
	for i := range x {
		x[i] = uint16(i)
	}
	got, want := make([]byte, len(x)), make([]byte, len(x))
	for _, scale := range []float32{1, 448, 3.7, 1e-3, 1 << 20, 1e-30, 448 / 1e-4, float32(math.Inf(1))} {
		castE4M3(got, x, scale)
		castE4M3Go(want, x, scale)
		for i := range x {
			if got[i] != want[i] {
				t.Fatalf("scale %g, bf16 %#04x: %#02x, want %#02x", scale, x[i], got[i], want[i])
			}
		}
	}
}

// TestMaxAbsBF16AVX2MatchesGo: the AVX2 maximum ignores NaNs and signs as
// the Go loop does, for lengths around the vector width.
func TestMaxAbsBF16AVX2MatchesGo(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewSource(3))
	for _, n := range []int{1, 15, 16, 17, 128, 131, 2048} {
		for trial := range 50 {
			x := make([]uint16, n)
			for i := range x {
				x[i] = uint16(r.Intn(1 << 16))
				if trial%2 == 0 {
					x[i] &= 0x87ff // mostly small magnitudes, so one NaN would stand out
				}
			}
			x[r.Intn(n)] = 0x7fc1 // a NaN
			if got, want := maxAbsBF16(x), maxAbsBF16Go(x); got != want {
				t.Fatalf("n=%d: %#x, want %#x", n, got, want)
			}
		}
	}
	// The largest at every position in turn: each of the kernel's 16
	// columns (and its halving of them to one) must carry it.
	for p := range 128 {
		x := make([]uint16, 128)
		for i := range x {
			x[i] = uint16(0x8000 | i) // -0 to small negatives
		}
		x[p] = 0xc0a0 // -5, the largest magnitude
		if got := maxAbsBF16(x); got != 0x40a0 {
			t.Fatalf("largest at %d: %#x, want 0x40a0", p, got)
		}
	}
}
