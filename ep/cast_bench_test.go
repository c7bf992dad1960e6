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
