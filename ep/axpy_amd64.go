package ep

import (
	"golang.org/x/sys/cpu"

	"github.com/mooncake-go/mooncake/internal/half"
)

var haveAVX2 = cpu.X86.HasAVX2

// axpyBF16AVX2 does acc[i] += w * float32(row[i]) for i < n, n a multiple
// of 16: multiply then add, unfused, so results equal the scalar loop's.
//
//go:noescape
func axpyBF16AVX2(acc *float32, row *uint16, n int, w float32)

func axpyBF16(acc []float32, row []uint16, w float32) {
	n := len(acc)
	row = row[:n]
	if haveAVX2 && n >= 16 {
		m := n &^ 15
		axpyBF16AVX2(&acc[0], &row[0], m, w)
		acc, row = acc[m:], row[m:]
	}
	axpyBF16Go(acc, row, w)
}

// f32ToBF16AVX2 converts n floats (n a multiple of 8) like half.F32ToBF16.
//
//go:noescape
func f32ToBF16AVX2(dst *uint16, src *float32, n int)

// toBF16 does dst[i] = half.F32ToBF16(src[i]).
func toBF16(dst []uint16, src []float32) {
	n := len(src)
	dst = dst[:n]
	if haveAVX2 && n >= 8 {
		m := n &^ 7
		f32ToBF16AVX2(&dst[0], &src[0], m)
		dst, src = dst[m:], src[m:]
	}
	for i, v := range src {
		dst[i] = half.F32ToBF16(v)
	}
}
