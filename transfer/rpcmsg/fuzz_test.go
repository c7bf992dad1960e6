package rpcmsg

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzReadMessage feeds arbitrary bytes to the server's message reader: it
// never panics, never returns more than the bound, refuses a length over
// the bound before reading the payload, and what it accepts re-encodes to
// the bytes it read.
func FuzzReadMessage(f *testing.F) {
	f.Add(encodeMessage(7, []byte("hello")))
	f.Add(encodeMessage(0, nil))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0x10, 0})
	f.Add(append(encodeMessage(2, []byte("ab")), encodeMessage(3, []byte("c"))...))
	const max = 1 << 12
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for r.Len() > 0 {
			at := len(b) - r.Len()
			kind, data, err := readMessage(r, max)
			if errors.Is(err, errTooLarge) {
				if consumed := len(b) - r.Len() - at; consumed != headerSize {
					t.Fatalf("a refused message read %d bytes, want only its header", consumed)
				}
				return
			}
			if err != nil {
				return
			}
			if len(data) > max {
				t.Fatalf("accepted %d bytes over the bound %d", len(data), max)
			}
			if enc := encodeMessage(kind, data); !bytes.Equal(enc, b[at:len(b)-r.Len()]) {
				t.Fatalf("message (%d, %q) re-encodes differently", kind, data)
			}
		}
	})
}
