// Package handshake is the Transfer Engine's handshake protocol on a
// segment's RPC port, in upstream's framing: a descriptor request (how
// P2PHANDSHAKE peers find each other), notifications, and probes. It has
// the client call (Call) and the server that answers them (Server).
package handshake

import (
	"encoding/binary"
	"io"

	"github.com/mooncake-go/mooncake/transfer/errcode"
	"github.com/mooncake-go/mooncake/transfer/internal/readn"
)

// Frame types (upstream include/common.h).
const (
	FrameConnection byte = 0
	FrameMetadata   byte = 1
	FrameNotify     byte = 2
	FrameProbe      byte = 3
)

// WriteFrame sends one frame: a little-endian u64 length (payload+1), the
// type byte, then the JSON payload.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	buf := make([]byte, 9+len(payload))
	binary.LittleEndian.PutUint64(buf, uint64(len(payload))+1)
	buf[8] = typ
	copy(buf[9:], payload)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame of at most max bytes. A legacy frame (no type
// byte, payload starting with '{') is reported as a Connection frame, as
// upstream does.
func ReadFrame(r io.Reader, max uint64) (typ byte, payload []byte, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint64(hdr[:])
	if n == 0 || n > max {
		return 0, nil, errcode.Errorf(errcode.MalformedJSON, nil, "handshake frame length %d outside 1..%d", n, max)
	}
	body, err := readn.Read(r, n) // grows with the bytes, not the claim
	if err != nil {
		return 0, nil, err
	}
	if body[0] == '{' {
		return FrameConnection, body, nil
	}
	if body[0] > FrameProbe {
		return 0, nil, errcode.Errorf(errcode.MalformedJSON, nil, "unknown handshake frame type %d", body[0])
	}
	return body[0], body[1:], nil
}
