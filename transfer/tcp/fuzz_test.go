package tcp

import (
	"bytes"
	"testing"

	"github.com/mooncake-go/mooncake/transfer/transport"
)

// FuzzTCPFrames feeds arbitrary bytes to the TCP header and status parsers:
// they must never panic, and whatever they accept must encode back to the
// same meaning.
func FuzzTCPFrames(f *testing.F) {
	var hb [tcpHeaderSize]byte
	tcpHeader{size: 4096, addr: 0x7f0000001000, opcode: transport.OpWrite, v2: true}.encode(&hb)
	f.Add(hb[:])
	st := encodeStatus(statusRejected)
	f.Add(st[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := decodeTCPHeader(b); err == nil {
			var again [tcpHeaderSize]byte
			h.encode(&again)
			h2, err := decodeTCPHeader(again[:])
			if err != nil || h2 != h {
				t.Fatalf("header %+v re-decoded as %+v, %v", h, h2, err)
			}
		}
		if len(b) >= 8 {
			if code, err := decodeStatus(b[:8]); err == nil {
				if enc := encodeStatus(code); !bytes.Equal(enc[:], b[:8]) {
					t.Fatalf("status %d re-encodes differently", code)
				}
			}
		}
	})
}
