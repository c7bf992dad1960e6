package rpcmsg

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"
)

// TestClaimedLengthIsNotAllocated: a header claiming a message of the
// default bound (1 GiB) followed by a few bytes costs the server about the
// bytes that came, not the claim (the server allocated the claimed length
// on reading the header, so a few clients of 9 bytes each could exhaust
// its memory).
func TestClaimedLengthIsNotAllocated(t *testing.T) {
	var hdr [headerSize + 3]byte
	hdr[0] = 1
	binary.LittleEndian.PutUint64(hdr[1:], DefaultMaxMessage)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, _, err := readMessage(bytes.NewReader(hdr[:]), DefaultMaxMessage); err == nil {
		t.Fatal("a message shorter than its header claims was accepted")
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Fatalf("a %d-byte claim over 3 bytes allocated %d bytes", DefaultMaxMessage, got)
	}
}
