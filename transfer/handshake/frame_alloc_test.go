package handshake

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"
)

// TestReadFrameAllocatesWithTheBytes: a header claiming the largest frame
// allowed, followed by two bytes, costs the reader about the bytes that
// came, not the claim (a peer could otherwise make every connection
// allocate MC_HANDSHAKE_MAX_LENGTH with 8 bytes).
func TestReadFrameAllocatesWithTheBytes(t *testing.T) {
	const max = 128 << 20
	var b [10]byte
	binary.LittleEndian.PutUint64(b[:], max)
	b[8], b[9] = FrameNotify, '{'
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, _, err := ReadFrame(bytes.NewReader(b[:]), max); err == nil {
		t.Fatal("a frame shorter than its header claims was accepted")
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Fatalf("a %d-byte claim over 2 bytes allocated %d bytes", uint64(max), got)
	}
}
