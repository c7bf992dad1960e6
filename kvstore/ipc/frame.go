package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Frame kinds.
const (
	kindRequest  = 1
	kindResponse = 2
)

// headerSize is the fixed frame header: body length (u32), call id (u32),
// kind (u8), number of attached descriptors (u8), two zero bytes; all
// little-endian.
const headerSize = 12

// MaxBody bounds one frame's body: control messages only, bulk data moves
// through shared memory.
const MaxBody = 16 << 20

// maxFDs bounds the descriptors attached to one frame.
const maxFDs = 8

// ErrProtocol reports a malformed frame; the connection is unusable after it.
var ErrProtocol = errors.New("ipc: protocol error")

// frame is one message on the wire.
type frame struct {
	id   uint32
	kind uint8
	body []byte
	fds  []int
}

// encodeHeader writes f's header into h.
func encodeHeader(h []byte, f *frame) {
	binary.LittleEndian.PutUint32(h[0:], uint32(len(f.body)))
	binary.LittleEndian.PutUint32(h[4:], f.id)
	h[8] = f.kind
	h[9] = uint8(len(f.fds))
	h[10], h[11] = 0, 0
}

// decodeHeader parses a header: body length, id, kind, descriptor count.
func decodeHeader(h []byte) (n int, id uint32, kind uint8, nfds int, err error) {
	n = int(binary.LittleEndian.Uint32(h[0:]))
	id, kind, nfds = binary.LittleEndian.Uint32(h[4:]), h[8], int(h[9])
	switch {
	case n > MaxBody:
		err = fmt.Errorf("%w: body of %d bytes (limit %d)", ErrProtocol, n, MaxBody)
	case kind != kindRequest && kind != kindResponse:
		err = fmt.Errorf("%w: frame kind %d", ErrProtocol, kind)
	case nfds > maxFDs:
		err = fmt.Errorf("%w: %d descriptors in one frame (limit %d)", ErrProtocol, nfds, maxFDs)
	case h[10] != 0 || h[11] != 0:
		err = fmt.Errorf("%w: reserved header bytes set", ErrProtocol)
	}
	return
}

// writeFrame sends f in full on a raw socket; the descriptors travel with
// the first bytes (the header), so the reader has them by the time it has
// parsed the header.
func writeFrame(rc syscall.RawConn, f *frame) error {
	if len(f.body) > MaxBody || len(f.fds) > maxFDs {
		return fmt.Errorf("%w: frame too large to send", ErrProtocol)
	}
	buf := make([]byte, headerSize+len(f.body))
	encodeHeader(buf, f)
	copy(buf[headerSize:], f.body)
	var oob []byte
	if len(f.fds) > 0 {
		oob = unix.UnixRights(f.fds...)
	}
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for len(buf) > 0 {
			n, err := unix.SendmsgN(int(fd), buf, oob, nil, unix.MSG_NOSIGNAL)
			if err == unix.EAGAIN {
				return false // wait until writable, then continue
			}
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				werr = err
				return true
			}
			buf, oob = buf[n:], nil
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}
