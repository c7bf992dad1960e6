package ep

import (
	"testing"

	"github.com/mooncake-go/mooncake/internal/half"
)

func BenchmarkCastFP8Token(b *testing.B) {
	const h = 2048
	x := make([]uint16, h)
	for i := range x {
		x[i] = half.F32ToBF16(float32(i%97) - 40)
	}
	p := make([]byte, h)
	s := make([]float32, h/128)
	b.SetBytes(h * 2)
	for i := 0; i < b.N; i++ {
		castFP8Token(x, p, s)
	}
}

func BenchmarkCastE4M3(b *testing.B) {
	x := make([]uint16, 128)
	for i := range x {
		x[i] = half.F32ToBF16(float32(i%97) - 40)
	}
	out := make([]byte, len(x))
	b.SetBytes(int64(2 * len(x)))
	b.Run("avx2", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			castE4M3(out, x, 3.5)
		}
	})
	b.Run("go", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			castE4M3Go(out, x, 3.5)
		}
	})
	b.Run("maxabs", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			maxAbsBF16(x)
		}
	})
	b.Run("maxabs-go", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			maxAbsBF16Go(x)
		}
	})
}
