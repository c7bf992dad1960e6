package handshake

import (
	"bytes"
	"testing"
)

// FuzzFrame feeds arbitrary bytes to the frame reader and to the server's
// answer logic: no panic, bounded allocation, and accepted frames
// round-trip.
func FuzzFrame(f *testing.F) {
	var buf bytes.Buffer
	WriteFrame(&buf, FrameNotify, []byte(`{"name":"a","notify_msg":"b"}`))
	f.Add(buf.Bytes())
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	srv := NewServer(nil, 1<<16, func() ([]byte, error) { return []byte(`{"name":"x"}`), nil }, func(Notify) {})
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, payload, err := ReadFrame(bytes.NewReader(b), srv.max)
		if err != nil {
			return
		}
		srv.answer(typ, payload)
		if typ == FrameConnection && len(payload) > 0 && payload[0] == '{' {
			return // legacy frame: no type byte to round-trip
		}
		var out bytes.Buffer
		WriteFrame(&out, typ, payload)
		t2, p2, err := ReadFrame(&out, srv.max)
		if err != nil || t2 != typ || !bytes.Equal(p2, payload) {
			t.Fatalf("frame (%d, %q) did not round-trip: (%d, %q, %v)", typ, payload, t2, p2, err)
		}
	})
}
