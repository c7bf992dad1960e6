package ipc

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// errPeerClosed is the end of the stream.
var errPeerClosed = errors.New("ipc: peer closed the connection")

// fdBatch is what one recvmsg returned with descriptors: the descriptors
// and the stream offsets [start, end) of the bytes that came with them.
type fdBatch struct {
	start, end uint64
	fds        []int
}

// reader reassembles frames from a stream socket and gives each frame the
// descriptors its header announces.
//
// A writer sends a frame's descriptors with the frame's first bytes
// (writeFrame). The kernel returns descriptors with the recvmsg that reads
// the first byte sent with them and ends that recvmsg within those bytes
// (bytes sent earlier without descriptors may come first in the same
// recvmsg). So a batch's descriptors were sent with the bytes that hold
// the batch's last byte, and belong to the last frame whose header starts
// among the batch's bytes, in number the header's count. Anything else is a
// protocol error that ends the connection: a frame that announces
// descriptors none brought, a count that differs from the batch's,
// descriptors no frame announced, more than a frame may carry
// (MSG_CTRUNC). The reader never keeps descriptors beyond the frame being
// read, and on every error they are closed (closePending).
type reader struct {
	recv    func(p, oob []byte) (n, oobn, flags int, err error)
	buf     []byte    // received, not yet parsed
	off     uint64    // stream offset of buf[0]
	batches []fdBatch // received, not yet claimed; in stream order
	chunk   []byte
	oob     []byte
}

// newReader reads frames from a raw socket.
func newReader(rc syscall.RawConn) *reader {
	return newReaderFunc(func(p, oob []byte) (n, oobn, flags int, err error) {
		var rerr error
		err = rc.Read(func(fd uintptr) bool {
			for {
				n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), p, oob, unix.MSG_CMSG_CLOEXEC)
				if rerr == unix.EINTR {
					continue
				}
				return rerr != unix.EAGAIN
			}
		})
		if err == nil {
			err = rerr
		}
		return
	})
}

// newReaderFunc reads frames through recv, which has recvmsg's contract.
func newReaderFunc(recv func(p, oob []byte) (n, oobn, flags int, err error)) *reader {
	// Room for twice the descriptors a frame may carry: a sender of more
	// is cut short (MSG_CTRUNC), and the kernel closes what did not fit.
	return &reader{recv: recv, chunk: make([]byte, 64<<10), oob: make([]byte, unix.CmsgSpace(4*maxFDs*2))}
}

// received is the stream offset just past the bytes received so far.
func (r *reader) received() uint64 { return r.off + uint64(len(r.buf)) }

// fill reads once more from the socket; errPeerClosed when the peer closed.
func (r *reader) fill() error {
	n, oobn, flags, err := r.recv(r.chunk, r.oob)
	if err != nil {
		return err
	}
	fds, perr := rightsOf(r.oob[:oobn])
	switch {
	case perr != nil:
		closeFDs(fds)
		return perr
	case flags&unix.MSG_CTRUNC != 0:
		closeFDs(fds)
		return fmt.Errorf("%w: more descriptors in one message than a frame may carry (%d)", ErrProtocol, maxFDs)
	case n == 0:
		closeFDs(fds)
		return errPeerClosed
	}
	if len(fds) > 0 {
		r.batches = append(r.batches, fdBatch{start: r.received(), end: r.received() + uint64(n), fds: fds})
	}
	r.buf = append(r.buf, r.chunk[:n]...)
	return nil
}

// rightsOf returns every descriptor in a control message buffer.
func rightsOf(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control message: %v", ErrProtocol, err)
	}
	var fds []int
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds, nil
}

// next returns the next whole frame, which owns its descriptors.
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
	start := r.off
	end := start + headerSize + uint64(n)
	fds, err := r.claim(start, end, nfds)
	if err == nil {
		err = r.checkUnclaimed(end)
	}
	for err == nil && uint64(len(r.buf)) < headerSize+uint64(n) {
		if err = r.fill(); err == nil {
			err = r.checkUnclaimed(end)
		}
	}
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	f := &frame{id: id, kind: kind, body: append([]byte(nil), r.buf[headerSize:headerSize+n]...), fds: fds}
	r.off = end
	r.buf = r.buf[headerSize+n:]
	if len(r.buf) == 0 {
		r.buf = nil
	}
	return f, nil
}

// claim takes the descriptors of the frame at stream offsets [start, end)
// that announces nfds of them: the batch whose bytes hold the frame's
// first byte and end inside the frame (were they to reach past it, a later
// frame would start among them, and they would be that one's).
func (r *reader) claim(start, end uint64, nfds int) ([]int, error) {
	if err := r.checkUnclaimed(start); err != nil {
		return nil, err
	}
	if nfds == 0 {
		return nil, nil
	}
	if len(r.batches) == 0 || r.batches[0].start > start || r.batches[0].end > end {
		return nil, fmt.Errorf("%w: a frame announces %d descriptors and none came with it", ErrProtocol, nfds)
	}
	b := r.batches[0]
	r.batches = r.batches[1:]
	if len(b.fds) != nfds {
		closeFDs(b.fds)
		return nil, fmt.Errorf("%w: a frame announces %d descriptors and %d came with it", ErrProtocol, nfds, len(b.fds))
	}
	return b.fds, nil
}

// checkUnclaimed fails when descriptors came with bytes that all lie
// before stream offset limit, where no frame that could claim them starts
// any more.
func (r *reader) checkUnclaimed(limit uint64) error {
	if len(r.batches) > 0 && r.batches[0].end <= limit {
		return fmt.Errorf("%w: %d descriptors that no frame announced", ErrProtocol, len(r.batches[0].fds))
	}
	return nil
}

// closePending closes the descriptors no frame claimed.
func (r *reader) closePending() {
	for _, b := range r.batches {
		closeFDs(b.fds)
	}
	r.batches = nil
}
