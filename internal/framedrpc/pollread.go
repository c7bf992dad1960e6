package framedrpc

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pollSlice bounds one wait in poll(2), so that a cancelled context or a
// closed connection is noticed within it.
const pollSlice = 10 * time.Millisecond

// pollReader reads a socket by waiting in poll(2) on the calling thread
// instead of parking the goroutine in Go's network poller.
//
// A call from C (Python's ctypes, the torch plugin) runs on a goroutine
// locked to the caller's thread. When that goroutine parks for the reply,
// the netpoller must wake another thread, which then hands the goroutine
// back to the locked one: two or three context switches per call. Waiting
// in the kernel on the caller's own thread costs one wake-up: the reply's
// arrival.
type pollReader struct {
	raw  syscall.RawConn
	ctx  context.Context // of the call in progress
	stop atomic.Bool     // set before the connection is closed
	fds  [1]unix.PollFd
}

func newPollReader(c syscall.Conn) (*pollReader, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &pollReader{raw: raw, ctx: context.Background()}, nil
}

// Read implements io.Reader; it ends with the context's error when the
// call's context is done first, and with net.ErrClosed once stop is set.
func (r *pollReader) Read(p []byte) (int, error) {
	var n int
	var rerr error
	err := r.raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = rawRead(fd, p)
			if !errors.Is(rerr, unix.EAGAIN) {
				if rerr != nil {
					n = 0
				}
				return true
			}
			wait := pollSlice
			if d, ok := r.ctx.Deadline(); ok {
				wait = min(wait, time.Until(d))
			}
			if r.stop.Load() {
				rerr = net.ErrClosed
				return true
			}
			if err := r.ctx.Err(); err != nil || wait <= 0 {
				rerr = firstError(err, context.DeadlineExceeded)
				return true
			}
			r.fds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
			if _, err := unix.Poll(r.fds[:], int(wait.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
				rerr = err
				return true
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
