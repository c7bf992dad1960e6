package pollread

import (
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// RawIO reads and writes a connection's non-blocking socket with raw
// system calls, waiting in Go's network poller only when the socket is not
// ready.
//
// A system call made through the syscall package enters the Go scheduler's
// syscall state, and the first one after the process went idle wakes the
// runtime's monitor thread (sysmon), which then polls every 20 µs until the
// process is idle again. A master answering one small call at a time
// otherwise pays two or three of those wake-ups per call, more than the
// call's own work. read(2) and send(2) on a non-blocking socket return at
// once, so they need none of that.
type RawIO struct {
	raw syscall.RawConn
}

// NewRawIO returns c's socket as a RawIO, or c itself when c has no file
// descriptor (a pipe in tests).
func NewRawIO(c net.Conn) io.ReadWriter {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return RawIO{raw: raw}
}

// Read implements io.Reader; deadlines set on the connection apply.
func (r RawIO) Read(p []byte) (int, error) {
	var n int
	var rerr error
	err := r.raw.Read(func(fd uintptr) bool {
		n, rerr = rawRead(fd, p)
		return rerr != unix.EAGAIN
	})
	return readOutcome(n, len(p), err, rerr)
}

// Write implements io.Writer: all of p, or an error.
func (r RawIO) Write(p []byte) (int, error) {
	done := 0
	var werr error
	err := r.raw.Write(func(fd uintptr) bool {
		for done < len(p) {
			n, err := rawWrite(fd, p[done:])
			if err == unix.EAGAIN {
				return false
			}
			if err != nil {
				werr = err
				return true
			}
			done += n
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return done, err
}

// rawRead is read(2) without the scheduler's syscall bookkeeping; EINTR is
// retried. Only for non-blocking descriptors.
func rawRead(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, errno := sysRead(fd, p)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return n, nil
	}
}

// rawWrite is send(2) with MSG_NOSIGNAL (a peer that reset the
// connection gives EPIPE, never a SIGPIPE) without the scheduler's syscall
// bookkeeping; EINTR is retried. Only for non-blocking sockets.
func rawWrite(fd uintptr, p []byte) (int, error) {
	for {
		n, errno := sysSend(fd, p)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return n, nil
	}
}
