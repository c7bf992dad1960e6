package consistency

import (
	"strings"
	"testing"
)

func TestValueRoundTrip(t *testing.T) {
	for _, size := range []int{MinValueSize("k1"), 100, 4099, 1 << 20} {
		id := ValueID{Writer: 3, Seq: uint32(size)}
		b := make([]byte, size)
		Encode(b, "k1", id)
		got, err := Decode(b, "k1")
		if err != nil || got != id {
			t.Fatalf("size %d: Decode = %v, %v; want %v", size, got, err, id)
		}
	}
}

// TestTornValueIsDetected mixes two values of the same size, as a read
// racing an in-place overwrite would see them, and reads another key's
// value: neither decodes.
func TestTornValueIsDetected(t *testing.T) {
	const size = 64 << 10
	a, b := make([]byte, size), make([]byte, size)
	Encode(a, "k", ValueID{Writer: 1, Seq: 1})
	Encode(b, "k", ValueID{Writer: 2, Seq: 1})
	// From byte 8 (inside the writer field) the two differ.
	for _, cut := range []int{8, 30, size / 2, size - 9, size - 1} {
		mixed := append(append([]byte{}, b[:cut]...), a[cut:]...)
		if id, err := Decode(mixed, "k"); err == nil {
			t.Fatalf("new bytes up to %d, old after: decoded as %v", cut, id)
		}
	}
	if _, err := Decode(a, "other"); err == nil || !strings.Contains(err.Error(), "names key") {
		t.Fatalf("another key's value: %v", err)
	}
	if _, err := Decode(a[:size-1], "k"); err == nil {
		t.Fatal("a truncated value decoded")
	}
}
