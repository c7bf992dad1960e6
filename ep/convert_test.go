package ep

import (
	"math"
	"math/rand"
	"testing"

	"github.com/mooncake-go/mooncake/internal/half"
)

// refE4M3 is the scalar reference: the e4m3fn value nearest to f (ties to
// even mantissa), saturated at 448.
func refE4M3(f float32) uint8 {
	if math.IsNaN(float64(f)) {
		return 0x7f
	}
	best, bestD := uint8(0), math.Inf(1)
	for c := 0; c < 0x7f; c++ { // all finite non-negative codes
		v := float64(e4m3ToF32(uint8(c)))
		d := math.Abs(v - math.Abs(float64(f)))
		if d < bestD || (d == bestD && c&1 == 0) {
			best, bestD = uint8(c), d
		}
	}
	if math.Abs(float64(f)) >= 448 {
		best = 0x7e
	}
	if f < 0 || (f == 0 && math.Signbit(float64(f))) {
		best |= 0x80
	}
	return best
}

func TestE4M3MatchesReference(t *testing.T) {
	vals := []float32{0, 1, -1, 448, 449, 470, 1e9, -1e9, 0.001953125, 0.0009765625, 0.015625, 0.0146, 3.5, 3.75, 17, 240, 239, 250, -0.3}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 20000; i++ {
		vals = append(vals, float32(r.NormFloat64()*math.Pow(2, float64(r.Intn(24)-14))))
	}
	for _, v := range vals {
		if got, want := f32ToE4M3(v), refE4M3(v); got != want {
			t.Fatalf("e4m3(%g) = %#x, want %#x", v, got, want)
		}
	}
}

func TestCastFP8TokenExactForConstantGroups(t *testing.T) {
	h := 256
	x := make([]uint16, h)
	for i := range x {
		if i < 128 {
			x[i] = half.F32ToBF16(-126)
		} else {
			x[i] = half.F32ToBF16(5)
		}
	}
	p := make([]byte, h)
	s := make([]float32, 2)
	castFP8Token(x, p, s)
	for i := range x {
		got := e4m3ToF32(p[i]) * s[i/128]
		if math.Abs(float64(got-half.BF16ToF32(x[i]))) > 1e-4*math.Abs(float64(got)) {
			t.Fatalf("channel %d: %g != %g", i, got, half.BF16ToF32(x[i]))
		}
	}
}

// castFP8Token's inlined fast path agrees with f32ToE4M3 everywhere.
func TestCastFP8TokenMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	x := make([]uint16, 128*64)
	for i := range x {
		x[i] = half.F32ToBF16(float32(r.NormFloat64() * math.Pow(2, float64(r.Intn(40)-20))))
	}
	x[5] = half.F32ToBF16(float32(math.NaN()))
	p := make([]byte, len(x))
	s := make([]float32, len(x)/128)
	castFP8Token(x, p, s)
	for g := range s {
		amax := float32(1e-4)
		for _, b := range x[g*128 : (g+1)*128] {
			if v := float32(math.Abs(float64(half.BF16ToF32(b)))); v > amax {
				amax = v
			}
		}
		scale := float32(448) / amax
		for i := g * 128; i < (g+1)*128; i++ {
			if i == 5 {
				continue
			}
			if want := f32ToE4M3(half.BF16ToF32(x[i]) * scale); p[i] != want {
				t.Fatalf("channel %d: %#x, want %#x", i, p[i], want)
			}
		}
	}
}

func TestToBF16MatchesScalar(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	src := make([]float32, 1003)
	for i := range src {
		src[i] = math.Float32frombits(r.Uint32())
	}
	src[0], src[1], src[2] = float32(math.Inf(1)), float32(math.NaN()), 1.00390625
	dst := make([]uint16, len(src))
	toBF16(dst, src)
	for i, v := range src {
		if dst[i] != half.F32ToBF16(v) {
			t.Fatalf("%d: %g -> %#x, want %#x", i, v, dst[i], half.F32ToBF16(v))
		}
	}
}
