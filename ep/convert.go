package ep

import (
	"math"

	"github.com/mooncake-go/mooncake/internal/half"
)

// f32ToE4M3 converts to float8 e4m3fn, rounding to nearest even and
// saturating finite values at ±448 (__nv_cvt_float_to_fp8 with
// __NV_SATFINITE). NaN maps to 0x7f.
func f32ToE4M3(f float32) uint8 {
	u := math.Float32bits(f)
	sign := uint8(u>>24) & 0x80
	a := u & 0x7fffffff
	switch {
	case a >= 0x43e00000: // >= 448 (or inf, NaN)
		if a > 0x7f800000 {
			return 0x7f
		}
		return sign | 0x7e
	case a < 0x3c800000: // < 2^-6: subnormal, step 2^-9. Adding 2^14 makes
		// the float's ulp 2^-9, so the addition rounds to nearest even.
		m := math.Float32bits(math.Float32frombits(a)+16384) - 0x46800000
		return sign | uint8(m) // m == 8 is the smallest normal, code 0x08
	}
	// Normal: rebias the exponent (127 -> 7) and round 23 mantissa bits to 3.
	v := a - (120 << 23)
	v = (v + 0x7ffff + (v>>20)&1) >> 20
	if v > 0x7e {
		v = 0x7e
	}
	return sign | uint8(v)
}

// e4m3ToF32 widens a float8 e4m3fn value (for tests and dequantisation).
func e4m3ToF32(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	exp := int(b>>3) & 0xf
	man := float32(b & 7)
	if exp == 0xf && b&7 == 7 {
		return float32(math.NaN())
	}
	if exp == 0 {
		return sign * man / 8 * float32(math.Ldexp(1, -6))
	}
	return sign * (1 + man/8) * float32(math.Ldexp(1, exp-7))
}

// castFP8Token quantises one bf16 token of h channels: per group of 128,
// amax = max(1e-4, max|x|), payload = e4m3(x * (448/amax)), scale =
// amax/448 (upstream's rule, MK ~240-265). payload gets h bytes, scales h/128.
func castFP8Token(x []uint16, payload []byte, scales []float32) {
	const invMax = float32(1.0 / fp8Max)
	for g := range scales {
		grp := x[g*ChannelsPerScale : (g+1)*ChannelsPerScale]
		amax := max(half.BF16ToF32(maxAbsBF16(grp)), 1e-4)
		castE4M3(payload[g*ChannelsPerScale:(g+1)*ChannelsPerScale], grp, float32(fp8Max)/amax)
		scales[g] = amax * invMax
	}
}

// maxAbsBF16Go is maxAbsBF16 in Go: for non-NaN bf16, magnitude order is
// integer order on the bits (NaN is ignored, as fmaxf does).
func maxAbsBF16Go(x []uint16) uint16 {
	var mx uint16
	for _, b := range x {
		if m := b & 0x7fff; m > mx && m <= 0x7f80 {
			mx = m
		}
	}
	return mx
}

// castE4M3Go is castE4M3 in Go: f32ToE4M3 with its common case (normal
// results) inlined.
func castE4M3Go(out []byte, x []uint16, scale float32) {
	out = out[:len(x)]
	for i, b := range x {
		u := math.Float32bits(half.BF16ToF32(b) * scale)
		a := u & 0x7fffffff
		var c uint32
		if a-0x3c800000 < 0x43e00000-0x3c800000 {
			c = a - (120 << 23)
			c = (c + 0x7ffff + (c>>20)&1) >> 20
			if c > 0x7e {
				c = 0x7e
			}
		} else {
			c = uint32(f32ToE4M3(math.Float32frombits(a)))
		}
		out[i] = uint8(c) | uint8(u>>24)&0x80
	}
}
