package ep

// maxAbsBF16AVX2 is the largest src[j]&0x7fff, NaNs counting as 0; n a
// multiple of 16.
//
//go:noescape
func maxAbsBF16AVX2(src *uint16, n int) uint16

// castE4M3AVX2 does dst[i] = f32ToE4M3(bf16(src[i]) * scale), n a
// multiple of 32.
//
//go:noescape
func castE4M3AVX2(dst *byte, src *uint16, n int, scale float32)

// maxAbsBF16 is the largest |x| of a bf16 row, on the bits (NaNs are
// ignored).
func maxAbsBF16(x []uint16) uint16 {
	if !haveAVX2 || len(x) < 16 {
		return maxAbsBF16Go(x)
	}
	m := len(x) &^ 15
	return max(maxAbsBF16AVX2(&x[0], m), maxAbsBF16Go(x[m:]))
}

// castE4M3 does out[i] = f32ToE4M3(bf16(x[i]) * scale).
func castE4M3(out []byte, x []uint16, scale float32) {
	out = out[:len(x)]
	if haveAVX2 && len(x) >= 32 {
		m := len(x) &^ 31
		castE4M3AVX2(&out[0], &x[0], m, scale)
		out, x = out[m:], x[m:]
	}
	castE4M3Go(out, x, scale)
}
