package transfer

import (
	"bytes"
	"testing"
)

// FuzzTCPFrames feeds arbitrary bytes to the TCP header and status parsers:
// they must never panic, and whatever they accept must encode back to the
// same meaning.
func FuzzTCPFrames(f *testing.F) {
	var hb [tcpHeaderSize]byte
	tcpHeader{size: 4096, addr: 0x7f0000001000, opcode: OpWrite, v2: true}.encode(&hb)
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

// FuzzHandshakeFrame feeds arbitrary bytes to the handshake frame reader
// and to the server's answer logic: no panic, bounded allocation, and
// accepted frames round-trip.
func FuzzHandshakeFrame(f *testing.F) {
	var buf bytes.Buffer
	writeFrame(&buf, frameNotify, []byte(`{"name":"a","notify_msg":"b"}`))
	f.Add(buf.Bytes())
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	srv := &handshakeServer{
		max:      1 << 16,
		metadata: func() ([]byte, error) { return []byte(`{"name":"x"}`), nil },
		notify:   func(Notify) {},
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, payload, err := readFrame(bytes.NewReader(b), srv.max)
		if err != nil {
			return
		}
		srv.answer(typ, payload)
		if typ == frameConnection && len(payload) > 0 && payload[0] == '{' {
			return // legacy frame: no type byte to round-trip
		}
		var out bytes.Buffer
		writeFrame(&out, typ, payload)
		t2, p2, err := readFrame(&out, srv.max)
		if err != nil || t2 != typ || !bytes.Equal(p2, payload) {
			t.Fatalf("frame (%d, %q) did not round-trip: (%d, %q, %v)", typ, payload, t2, p2, err)
		}
	})
}

// FuzzSegmentDescriptor checks the descriptor decoder never panics and
// rejects buffers that wrap the address space.
func FuzzSegmentDescriptor(f *testing.F) {
	f.Add([]byte(`{"name":"a","protocol":"tcp","tcp_data_port":1,"buffers":[{"name":"b","addr":1,"length":2}]}`))
	f.Add([]byte(`{"name":"a","buffers":[{"addr":18446744073709551615,"length":2}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeSegmentDesc(b)
		if err != nil {
			return
		}
		for _, buf := range d.Buffers {
			if buf.Addr+buf.Length < buf.Addr {
				t.Fatalf("accepted wrapping buffer %v", buf)
			}
		}
	})
}
