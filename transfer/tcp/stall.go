package tcp

import (
	"errors"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// Stalled links. Across hosts a link can stop carrying packets with
// neither end closing its connections (a partition, a switch that drops
// everything, a host that lost its network). TCP alone then retransmits
// with exponential backoff for many minutes: a request in flight waits out
// its whole deadline, and once the link is back its connection's next
// retransmission may still be seconds away (about 11 s after a 15 s
// partition). So every data connection is dialled with
//
//   - TCP_USER_TIMEOUT = stallTimeout: data it sent that stays
//     unacknowledged that long aborts the connection (ETIMEDOUT);
//   - keepalive probes once it has heard nothing for stallTimeout, every
//     stallTimeout/2: a connection that waits for a reply from a peer gone
//     silent aborts the same way (with a user timeout set, the kernel
//     aborts a keepalive that long unanswered);
//   - SO_LINGER 0: closing it discards what it has not sent (a reset, not
//     a FIN), so nothing of an abandoned request reaches the peer later;
//
// and a request whose connection aborted that way, or whose dial found the
// peer unreachable, goes again on a fresh connection, dialled in attempts
// of at most redialAttempt, until the request's deadline. A healed link
// carries the request again within about redialAttempt. Requests may run
// twice: a WRITE puts the same bytes at the same place again, a READ reads
// them again. A peer that refuses or resets the connection (its process is
// gone) fails the request at once, as before.

// stallTimeout is how long a data connection may go without its sent
// data acknowledged, or without answering keepalives, before it is
// abandoned (MC_TCP_STALL_TIMEOUT_MS).
var stallTimeout = time.Duration(envvars.TCPStallTimeoutMs.Int(1000)) * time.Millisecond

const (
	// redialAttempt bounds one dial attempt: a SYN lost to a partition is
	// sent again by a new attempt instead of the kernel's backoff.
	redialAttempt = 500 * time.Millisecond
	// redialPause is the least time between the starts of two attempts
	// (an unreachable network fails a dial at once).
	redialPause = 100 * time.Millisecond
)

// dialData dials addr in attempts until one connects, one fails for a
// reason other than an unreachable peer, or deadline passes.
func dialData(addr string, deadline time.Time) (*net.TCPConn, error) {
	for {
		start := time.Now()
		d := net.Dialer{
			Deadline:        earlier(deadline, start.Add(redialAttempt)),
			KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: stallTimeout, Interval: max(stallTimeout/2, time.Second/10), Count: 2},
			Control:         setUserTimeout,
		}
		conn, err := d.Dial("tcp", addr)
		if err == nil {
			tc := conn.(*net.TCPConn)
			tc.SetLinger(0)
			tc.SetNoDelay(true)
			return tc, nil
		}
		if !retryable(err, deadline) {
			return nil, err
		}
		time.Sleep(time.Until(earlier(deadline, start.Add(redialPause))))
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func setUserTimeout(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(stallTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}

// retryable reports whether a request that failed with err goes again on
// a fresh connection: the link stalled or the peer was unreachable, and
// deadline has not passed.
func retryable(err error, deadline time.Time) bool {
	if err == nil || !time.Now().Before(deadline) {
		return false
	}
	for _, e := range []error{unix.ETIMEDOUT, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.ENETDOWN} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() // a dial attempt's own deadline
}
