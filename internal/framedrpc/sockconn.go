package framedrpc

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// pollSlice bounds one wait in poll(2), so that a stop that raced the
// wait is noticed within it.
const pollSlice = 10 * time.Millisecond

// sockConn is a client's TCP socket kept outside Go's network poller: its
// owner reads and writes it with raw system calls and, when the socket is
// not ready, waits in poll(2) on its own thread.
//
// A call from C (Python's ctypes, the torch plugin) runs on a goroutine
// locked to the caller's thread. Parking that goroutine in the network
// poller costs two or three context switches per call (the poller's thread
// wakes, then hands the goroutine back), and a socket registered with the
// poller wakes the poller's thread on every reply even when nobody parks
// on it. Waiting in the kernel on the caller's own thread costs one
// wake-up: the reply's arrival.
//
// One goroutine at a time reads and writes (the connection's owner);
// abort may be called from any goroutine, release only by the owner once
// no read or write is in progress.
type sockConn struct {
	ctx  context.Context // of the owner's call in progress
	stop atomic.Bool     // set by abort

	mu   sync.Mutex // orders abort's shutdown(2) before release's close(2)
	fd   int
	open bool
}

// dialSock connects to addr with Go's dialer and then takes the socket
// out of the network poller.
func dialSock(ctx context.Context, addr string) (*sockConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close() // deregisters the original descriptor; the duplicate lives on
	tc := conn.(*net.TCPConn)
	if err := tc.SetNoDelay(true); err != nil {
		return nil, err
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(orig uintptr) {
		fd, dupErr = unix.FcntlInt(orig, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if dupErr != nil {
		return nil, dupErr
	}
	return &sockConn{ctx: context.Background(), fd: fd, open: true}, nil
}

// Read implements io.Reader. It ends with the call's context error when
// that context is done first, and with net.ErrClosed after abort.
func (s *sockConn) Read(p []byte) (int, error) {
	for {
		n, err := rawRead(uintptr(s.fd), p)
		if s.stop.Load() {
			return 0, net.ErrClosed
		}
		switch {
		case err == nil && n == 0 && len(p) > 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case !errors.Is(err, unix.EAGAIN):
			return 0, err
		}
		if err := s.wait(unix.POLLIN); err != nil {
			return 0, err
		}
	}
}

// Write implements io.Writer: all of p, or an error.
func (s *sockConn) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := rawWrite(uintptr(s.fd), p[done:])
		if s.stop.Load() {
			return done, net.ErrClosed
		}
		switch {
		case err == nil:
			done += n
			continue
		case !errors.Is(err, unix.EAGAIN):
			return done, err
		}
		if err := s.wait(unix.POLLOUT); err != nil {
			return done, err
		}
	}
	return done, nil
}

// wait blocks in poll(2) until the socket has events, the call's deadline
// passes, or one pollSlice ends.
func (s *sockConn) wait(events int16) error {
	wait := pollSlice
	if d, ok := s.ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	if err := s.ctx.Err(); err != nil || wait <= 0 {
		return firstError(err, context.DeadlineExceeded)
	}
	fds := [1]unix.PollFd{{Fd: int32(s.fd), Events: events}}
	if _, err := unix.Poll(fds[:], int(wait.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
		return err
	}
	return nil
}

// abort makes the owner's read or write in progress, and every later one,
// fail with net.ErrClosed; shutdown(2) wakes a wait in poll at once.
func (s *sockConn) abort() {
	s.stop.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open {
		_ = unix.Shutdown(s.fd, unix.SHUT_RDWR)
	}
}

// release closes the socket; the owner calls it once it is done with the
// connection.
func (s *sockConn) release() {
	s.stop.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open {
		s.open = false
		_ = unix.Close(s.fd)
	}
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
