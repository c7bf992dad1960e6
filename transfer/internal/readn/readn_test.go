package readn

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
)

// TestReadGrowsWithTheBytes: a payload arrives whole across growth steps,
// and a claimed length the stream does not carry ends in an error with a
// buffer near the bytes that came, not the claim.
func TestReadGrowsWithTheBytes(t *testing.T) {
	for _, n := range []int{0, 1, Step - 1, Step, Step + 1, 3*Step + 7} {
		src := bytes.Repeat([]byte{byte(n)}, n)
		got, err := Read(bytes.NewReader(src), uint64(n))
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("n=%d: %d bytes, %v", n, len(got), err)
		}
	}
	if _, err := Read(bytes.NewReader(make([]byte, 10)), 1<<40); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short stream: %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	Read(bytes.NewReader(make([]byte, 100)), 1<<40)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 2*Step {
		t.Fatalf("a 1 TiB claim over 100 bytes allocated %d bytes", got)
	}
}
