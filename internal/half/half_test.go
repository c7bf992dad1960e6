package half

import (
	"math"
	"testing"
)

func TestBF16RoundTrip(t *testing.T) {
	for _, f := range []float32{0, 1, -2.5, 3.1415926, 1e30, -1e-30} {
		b := F32ToBF16(f)
		if d := math.Abs(float64(BF16ToF32(b) - f)); d > math.Abs(float64(f))/128 {
			t.Fatalf("bf16(%g) -> %g", f, BF16ToF32(b))
		}
	}
	if F32ToBF16(1.00390625) != 0x3f80 { // tie rounds to even
		t.Fatalf("tie not to even: %#x", F32ToBF16(1.00390625))
	}
	if !math.IsNaN(float64(BF16ToF32(F32ToBF16(float32(math.NaN()))))) {
		t.Fatal("NaN lost")
	}
}
