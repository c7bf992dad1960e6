package pollread

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

// Conn is a TCP socket kept outside Go's network poller: its owner reads
// and writes it with raw system calls and, when the socket is not ready,
// waits in poll(2) on its own thread. A socket left in the poller would
// wake the poller's thread on every reply even when nobody parks on it.
//
// One goroutine at a time reads and writes (the connection's owner);
// Abort may be called from any goroutine, Release only by the owner once
// no read or write is in progress.
type Conn struct {
	ctx  context.Context // of the owner's call in progress
	stop atomic.Bool     // set by Abort
	busy Busy            // how a read waits before poll(2)

	mu   sync.Mutex // orders Abort's shutdown(2) before Release's close(2)
	fd   int
	open bool
}

// Dial connects to addr with Go's dialer (TCP_NODELAY set) and then takes
// the socket out of the network poller.
func Dial(ctx context.Context, addr string) (*Conn, error) {
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
	return &Conn{ctx: context.Background(), fd: fd, open: true}, nil
}

// SetContext makes the reads and writes that follow end with ctx's error
// once its deadline passes or it is cancelled (context.Background: never).
// A cancellation is noticed within one poll slice; to end a wait at once
// the owner also calls Abort (for instance from context.AfterFunc).
func (c *Conn) SetContext(ctx context.Context) { c.ctx = ctx }

// SetBusy makes a read that finds nothing to read keep trying as b says
// before it sleeps in poll(2).
func (c *Conn) SetBusy(b Busy) { c.busy = b }

// Read implements io.Reader. It ends with the context's error when its
// deadline passes first, and with net.ErrClosed after Abort.
func (c *Conn) Read(p []byte) (int, error) {
	busy := c.busy.Spin > 0 || c.busy.Yield > 0
	for {
		n, err := rawRead(uintptr(c.fd), p)
		if busy && errors.Is(err, unix.EAGAIN) {
			busy = false
			n, err = c.busy.read(uintptr(c.fd), p)
		}
		if c.stop.Load() {
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
		if err := wait(c.fd, unix.POLLIN, c.ctx, time.Time{}); err != nil {
			return 0, err
		}
	}
}

// Write implements io.Writer: all of p, or an error.
func (c *Conn) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := rawWrite(uintptr(c.fd), p[done:])
		if c.stop.Load() {
			return done, net.ErrClosed
		}
		switch {
		case err == nil:
			done += n
			continue
		case !errors.Is(err, unix.EAGAIN):
			return done, err
		}
		if err := wait(c.fd, unix.POLLOUT, c.ctx, time.Time{}); err != nil {
			return done, err
		}
	}
	return done, nil
}

// Abort makes the owner's read or write in progress, and every later one,
// fail with net.ErrClosed; shutdown(2) wakes a wait in poll at once.
func (c *Conn) Abort() {
	c.stop.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open {
		_ = unix.Shutdown(c.fd, unix.SHUT_RDWR)
	}
}

// Release closes the socket; the owner calls it once it is done with the
// connection.
func (c *Conn) Release() {
	c.stop.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open {
		c.open = false
		_ = unix.Close(c.fd)
	}
}
