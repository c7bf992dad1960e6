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

// reader reassembles frames from a stream socket, collecting the
// descriptors that arrive as ancillary data.
type reader struct {
	rc      syscall.RawConn
	buf     []byte // received, not yet parsed
	pending []int  // descriptors received, not yet claimed by a frame
	chunk   []byte
	oob     []byte
}

func newReader(rc syscall.RawConn) *reader {
	return &reader{rc: rc, chunk: make([]byte, 64<<10), oob: make([]byte, unix.CmsgSpace(4*maxFDs*2))}
}

// fill reads once more from the socket; io.EOF-like errors when the peer
// closed.
func (r *reader) fill() error {
	var n, oobn int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), r.chunk, r.oob, unix.MSG_CMSG_CLOEXEC)
			if rerr == unix.EINTR {
				continue
			}
			return rerr != unix.EAGAIN
		}
	})
	if err != nil {
		return err
	}
	if rerr != nil {
		return rerr
	}
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(r.oob[:oobn])
		if err != nil {
			return fmt.Errorf("%w: control message: %v", ErrProtocol, err)
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			r.pending = append(r.pending, fds...)
		}
	}
	if n == 0 {
		return errPeerClosed
	}
	r.buf = append(r.buf, r.chunk[:n]...)
	return nil
}

// errPeerClosed is the end of the stream.
var errPeerClosed = errors.New("ipc: peer closed the connection")

// next returns the next whole frame.
func (r *reader) next() (*frame, error) {
	for len(r.buf) < headerSize {
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
	n, id, kind, nfds, err := decodeHeader(r.buf)
	if err != nil {
		return nil, err
	}
	// Ancillary data rides with the header's bytes, so it is here now.
	if nfds > len(r.pending) {
		return nil, fmt.Errorf("%w: frame announces %d descriptors, %d arrived", ErrProtocol, nfds, len(r.pending))
	}
	for len(r.buf) < headerSize+n {
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
	f := &frame{id: id, kind: kind, body: append([]byte(nil), r.buf[headerSize:headerSize+n]...)}
	f.fds = append(f.fds, r.pending[:nfds]...)
	r.pending = r.pending[nfds:]
	r.buf = r.buf[headerSize+n:]
	if len(r.buf) == 0 {
		r.buf = nil
	}
	return f, nil
}

// closePending closes descriptors no frame claimed.
func (r *reader) closePending() {
	for _, fd := range r.pending {
		unix.Close(fd)
	}
	r.pending = nil
}
