package ep

import (
	"math/rand"
	"testing"

	"github.com/mooncake-go/mooncake/internal/half"
)

func BenchmarkReduceRows(b *testing.B) {
	const h, k = 2048, 8
	rows := make([][]uint16, k)
	ws := make([]float32, k)
	for j := range rows {
		rows[j] = make([]uint16, h)
		for i := range rows[j] {
			rows[j][i] = half.F32ToBF16(float32(i + j))
		}
		ws[j] = 0.25
	}
	out := make([]uint16, h)
	b.SetBytes(h * k * 2)
	for i := 0; i < b.N; i++ {
		reduceRows(out, rows, ws, make([]float32, len(out)))
	}
}

// reduceRows equals sequential float32 accumulation in k order.
func TestReduceRowsMatchesSequential(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for k := 0; k <= 9; k++ {
		h := 256
		rows := make([][]uint16, k)
		ws := make([]float32, k)
		acc := make([]float32, h)
		for j := range rows {
			rows[j] = make([]uint16, h)
			for i := range rows[j] {
				rows[j][i] = half.F32ToBF16(float32(rng.NormFloat64()))
			}
			ws[j] = float32(rng.Float64())
			for i := range acc {
				acc[i] += ws[j] * half.BF16ToF32(rows[j][i])
			}
		}
		out := make([]uint16, h)
		reduceRows(out, rows, ws, make([]float32, len(out)))
		for i := range out {
			if out[i] != half.F32ToBF16(acc[i]) {
				t.Fatalf("k=%d i=%d: %#x != %#x", k, i, out[i], half.F32ToBF16(acc[i]))
			}
		}
	}
}
