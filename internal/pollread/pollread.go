// Package pollread reads and writes sockets by waiting in poll(2) on the
// calling thread instead of parking the goroutine in Go's network poller,
// and with raw system calls outside the Go scheduler's syscall state.
//
// A call from C (Python's ctypes, the torch plugin) runs on a goroutine
// locked to the caller's thread. When that goroutine parks for a reply,
// the netpoller must wake another thread, which then hands the goroutine
// back to the locked one: two or three context switches per call. Waiting
// in the kernel on the caller's own thread costs one wake-up: the reply's
// arrival.
//
// Reader does that for a connection that stays in Go's poller (the
// Transfer Engine's synchronous TCP transfers); Conn is a socket taken out
// of the poller altogether (the store client's framed RPC), so that a
// reply does not also wake the poller's thread; RawIO is the raw read and
// write of a connection that does wait in the poller (the framed RPC
// server). Busy is how a Conn's read keeps trying before it sleeps in
// poll(2): spinning, then yield-polling (YieldCPU).
package pollread

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// slice bounds one wait in poll(2), so that a cancelled context or a
// stopped reader is noticed within it.
const slice = 10 * time.Millisecond

// Reader reads one socket in poll(2). Its context and deadline apply to
// the reads that follow SetContext and SetDeadline; a Reader serves one
// reader at a time.
type Reader struct {
	raw      syscall.RawConn
	ctx      context.Context
	deadline time.Time
	spin     time.Duration
	stop     atomic.Bool // set before the connection is closed
}

// New returns a Reader of c (a *net.TCPConn, say).
func New(c syscall.Conn) (*Reader, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &Reader{raw: raw, ctx: context.Background()}, nil
}

// SetContext makes the reads that follow end with ctx's error once ctx is
// done (context.Background: never).
func (r *Reader) SetContext(ctx context.Context) { r.ctx = ctx }

// SetDeadline makes the reads that follow end with
// context.DeadlineExceeded at t (the zero time: no deadline besides the
// context's).
func (r *Reader) SetDeadline(t time.Time) { r.deadline = t }

// SetSpin makes a read that finds nothing to read keep trying for d before
// it sleeps in poll(2). On an otherwise idle host a sleeping thread's CPU
// goes idle, and waking it costs tens of microseconds, as much as a small
// round trip itself; a reply that comes within d is taken without that.
// The spin costs its CPU time when the reply is slower.
func (r *Reader) SetSpin(d time.Duration) { r.spin = d }

// Stop makes a read in progress, and every later one, end with
// net.ErrClosed within one poll slice. Call it before closing the
// connection: a close waits for the read in progress to return.
func (r *Reader) Stop() { r.stop.Store(true) }

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	var n int
	var rerr error
	var spinUntil time.Time
	err := r.raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = rawRead(fd, p)
			if !errors.Is(rerr, unix.EAGAIN) {
				if rerr != nil {
					n = 0
				}
				return true
			}
			if r.stop.Load() {
				rerr = net.ErrClosed
				return true
			}
			if r.spin > 0 {
				now := time.Now()
				if spinUntil.IsZero() {
					spinUntil = now.Add(r.spin)
				}
				if now.Before(spinUntil) && (r.deadline.IsZero() || now.Before(r.deadline)) {
					continue
				}
			}
			if rerr = wait(int(fd), unix.POLLIN, r.ctx, r.deadline); rerr != nil {
				return true
			}
		}
	})
	return readOutcome(n, len(p), err, rerr)
}

// readOutcome is io.Reader's result of a read through a RawConn: its own
// error first, then the read(2)'s, then io.EOF for a zero-byte read of a
// non-empty buffer.
func readOutcome(n, want int, connErr, readErr error) (int, error) {
	switch {
	case connErr != nil:
		return 0, connErr
	case readErr != nil:
		return 0, readErr
	case n == 0 && want > 0:
		return 0, io.EOF
	}
	return n, nil
}

// wait blocks in poll(2) until fd has events, ctx is done, the earlier of
// ctx's deadline and deadline passes (context.DeadlineExceeded), or one
// slice ends (nil: the caller tries again).
func wait(fd int, events int16, ctx context.Context, deadline time.Time) error {
	d := slice
	if t, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(t))
	}
	if !deadline.IsZero() {
		d = min(d, time.Until(deadline))
	}
	if err := ctx.Err(); err != nil || d <= 0 {
		return cmp.Or(err, context.DeadlineExceeded)
	}
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: events}}
	if _, err := unix.Poll(fds[:], int(d.Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
		return err
	}
	return nil
}
