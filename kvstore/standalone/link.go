package standalone

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// releaseGrace bounds how long a call that got no reply waits, after its
// deadline or the end of its connection, for the daemon to confirm that
// nothing it still runs can write this dummy's memory. The daemon confirms
// within a few milliseconds of seeing the connection end (revoke.go); only
// a daemon that is stopped (SIGSTOP, a debugger) or starved for that long
// does not.
const releaseGrace = 5 * time.Second

// link is one connection of a dummy to the daemon, with a second
// descriptor of its socket (ipc.Conn.Hold) that keeps the socket open
// whatever the Conn does, so the dummy can still see when the daemon
// closes its end after its own side ended (a failed send closes it).
type link struct {
	conn   *ipc.Conn
	hold   int
	done   func()      // runs once l is closed (Dummy.forget)
	ending atomic.Bool // end has begun: calls take a new connection

	once     sync.Once
	released bool // set in once: the daemon closed its end within the grace
}

// usable reports whether calls may still be sent on l.
func (l *link) usable() bool { return !l.ending.Load() && l.conn.Err() == nil }

// end finishes a connection on which a call got no reply: it shuts this
// side's writing down (the daemon reads the end of the connection and
// revokes this dummy's memory, then closes its end), waits up to grace
// for the daemon's end to close, then closes l. It reports whether the
// daemon closed its end in time: only then is it sure that no call the
// daemon still runs for l can write this dummy's memory (or that the
// daemon is gone). Concurrent and later calls wait for the first and
// report the same.
func (l *link) end(grace time.Duration) bool {
	l.ending.Store(true)
	l.once.Do(func() {
		unix.Shutdown(l.hold, unix.SHUT_WR)
		l.released = awaitHangUp(l.hold, grace)
		l.conn.Close()
		unix.Close(l.hold)
		l.done()
	})
	return l.released
}

// close closes l without waiting for the daemon, for a connection on
// which no call runs (Dummy.Close, a failed connect): nothing the daemon
// still runs for it can then reach this dummy's memory. It waits for an
// end in progress.
func (l *link) close() {
	l.ending.Store(true)
	l.once.Do(func() {
		l.conn.Close()
		unix.Close(l.hold)
		l.done()
	})
}

// awaitHangUp waits up to grace until the peer of the socket fd has
// closed its end (POLLHUP: this side has shut down writing and the peer's
// end is gone) and reports whether it did.
func awaitHangUp(fd int, grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		// No events asked: poll reports only POLLHUP, POLLERR and POLLNVAL,
		// not the replies that still arrive.
		fds := []unix.PollFd{{Fd: int32(fd)}}
		n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		switch {
		case err == unix.EINTR || n == 0:
			continue
		case err != nil:
			return false
		case fds[0].Revents&unix.POLLHUP != 0:
			return true
		case fds[0].Revents&unix.POLLNVAL != 0:
			return false
		case fds[0].Revents&unix.POLLERR != 0:
			// A pending socket error (reading it clears it); the end of
			// the peer comes with POLLHUP.
			unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		}
	}
}
