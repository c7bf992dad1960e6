//go:build !amd64

package ep

import "github.com/mooncake-go/mooncake/internal/half"

func axpyBF16(acc []float32, row []uint16, w float32) { axpyBF16Go(acc, row, w) }

func toBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = half.F32ToBF16(v)
	}
}

func maxAbsBF16(x []uint16) uint16 { return maxAbsBF16Go(x) }

func castE4M3(out []byte, x []uint16, scale float32) { castE4M3Go(out, x, scale) }
