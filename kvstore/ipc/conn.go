package ipc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Message is a frame's body and the descriptors that came with it. The
// receiver owns the descriptors and must close them.
type Message struct {
	Body []byte
	FDs  []int
	// Conn is the connection a request came on: set in what a Handler
	// gets, ignored when sending.
	Conn *Conn
}

// Handler answers one request. It runs on its own goroutine; the
// descriptors of the reply are closed by the connection once sent. While
// a connection serves as many requests as its Limits allow it reads
// nothing, replies included, so a handler must not wait for a reply on
// its own connection.
type Handler func(req Message) (reply Message)

// ErrClosed is what calls on a connection that ended return.
var ErrClosed = errors.New("ipc: connection closed")

// ErrTooLarge is a request over MaxBody (or with too many descriptors).
var ErrTooLarge = errors.New("ipc: request too large")

// Conn is one end of a connection. Both ends may call (Call) and serve
// (the Handler given to NewConn); calls are multiplexed by id, so many
// may be in flight at once. Methods are safe for concurrent use.
type Conn struct {
	uc      *net.UnixConn
	rc      syscall.RawConn
	handler Handler
	limits  Limits
	own     slots // this connection's requests in flight (limits)

	wmu sync.Mutex // one frame at a time on the wire

	mu      sync.Mutex
	next    uint32
	pending map[uint32]chan Message
	err     error // why the connection ended; set once
	serving sync.WaitGroup

	done chan struct{}
}

// NewConn starts reading uc with the default Limits. handler may be nil
// when this end only calls.
func NewConn(uc *net.UnixConn, handler Handler) (*Conn, error) {
	return NewConnLimited(uc, handler, Limits{})
}

// NewConnLimited starts reading uc; the requests it serves are bounded by
// lim (zero fields take the defaults).
func NewConnLimited(uc *net.UnixConn, handler Handler, lim Limits) (*Conn, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	lim = lim.withDefaults()
	c := &Conn{uc: uc, rc: rc, handler: handler, limits: lim, own: newSlots(lim.MaxInFlight, lim.MaxInFlightBytes),
		pending: map[uint32]chan Message{}, done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// Done is closed when the connection has ended (peer gone, Close, or a
// protocol error).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while it is open).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection: calls in flight fail with ErrClosed. It waits
// for the handlers that are running to return.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	c.serving.Wait()
	return nil
}

// fail ends the connection once, with err (later calls do nothing).
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	// Counted before Done is closed, so whoever sees the end sees it counted.
	if errors.Is(err, ErrReplyTimeout) && c.limits.Shared != nil {
		c.limits.Shared.replyTimeouts.Add(1)
	}
	c.uc.Close()
	for _, ch := range pending {
		close(ch)
	}
	close(c.done)
}

// Call sends a request and waits for its reply until ctx ends. The
// descriptors in req are sent, not closed: the caller keeps them. A reply
// that does not come is ErrClosed (the connection ended) or ctx's error.
func (c *Conn) Call(ctx context.Context, req Message) (Message, error) {
	if len(req.Body) > MaxBody || len(req.FDs) > maxFDs {
		// Refused before anything is sent: the connection stays usable.
		return Message{}, fmt.Errorf("%w: a request of %d bytes and %d descriptors (limits %d, %d)",
			ErrTooLarge, len(req.Body), len(req.FDs), MaxBody, maxFDs)
	}
	ch := make(chan Message, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return Message{}, fmt.Errorf("%w: %v", ErrClosed, c.err)
	}
	c.next++
	id := c.next
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}
	if err := c.send(&frame{id: id, kind: kindRequest, body: req.Body, fds: req.FDs}, 0); err != nil {
		forget()
		c.fail(err)
		return Message{}, fmt.Errorf("%w: %v", ErrClosed, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return Message{}, fmt.Errorf("%w: %v", ErrClosed, c.Err())
		}
		return m, nil
	case <-ctx.Done():
		forget()
		return Message{}, ctx.Err()
	}
}

// Hold returns a second descriptor of the connection's socket, which the
// caller owns and must close. While it is open the socket stays open
// whatever the Conn does (Close, or the end of the connection): the peer
// sees the connection end (EOF, POLLHUP) only once the Conn has closed and
// the held descriptor is closed too. An owner uses it to finish what the
// peer takes the end as a signal of before the peer can see it (the daemon
// revoking a dummy's memory), or to watch for the peer's end itself. It
// fails once the Conn has closed its socket.
func (c *Conn) Hold() (int, error) {
	fd, derr := -1, error(nil)
	if err := c.rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	return fd, nil
}

// send writes f whole; with a timeout, a write that cannot finish within
// it (the peer does not read) fails with ErrReplyTimeout.
func (c *Conn) send(f *frame, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if err := c.uc.SetWriteDeadline(deadline); err != nil {
		return err
	}
	err := writeFrame(c.rc, f)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%v)", ErrReplyTimeout, timeout)
	}
	return err
}

func (c *Conn) readLoop() {
	r := newReader(c.rc)
	defer r.closePending()
	for {
		f, err := r.next()
		if err != nil {
			c.fail(err)
			return
		}
		switch f.kind {
		case kindResponse:
			c.mu.Lock()
			ch, ok := c.pending[f.id]
			delete(c.pending, f.id)
			c.mu.Unlock()
			if ok {
				ch <- Message{Body: f.body, FDs: f.fds}
			} else {
				closeFDs(f.fds) // the caller gave up waiting
			}
		case kindRequest:
			if c.handler == nil {
				closeFDs(f.fds)
				c.fail(fmt.Errorf("%w: request on a connection that serves none", ErrProtocol))
				return
			}
			if !c.admit(int64(len(f.body))) {
				closeFDs(f.fds)
				return // the connection ended while it waited
			}
			if !c.startServing() {
				c.release(int64(len(f.body)))
				closeFDs(f.fds)
				return
			}
			go c.serve(f)
		}
	}
}

// admit waits until a request of size body bytes fits this connection's
// limits and the shared budget; false when the connection ends first.
// While it waits nothing more is read from the peer.
func (c *Conn) admit(size int64) bool {
	waited, ok := c.own.take(size, c.done)
	if !ok {
		return false
	}
	if sh := c.limits.Shared; sh != nil {
		w, ok := sh.slots.take(size, c.done)
		if !ok {
			c.own.give(size)
			return false
		}
		if waited || w {
			sh.waits.Add(1)
		}
	}
	return true
}

// startServing counts a request in c.serving unless the connection has
// ended. fail ends it under mu before Close waits for the count, so no
// request is counted after Close began to wait.
func (c *Conn) startServing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	c.serving.Add(1)
	return true
}

// release gives back what admit took for a request of size body bytes.
func (c *Conn) release(size int64) {
	if sh := c.limits.Shared; sh != nil {
		sh.slots.give(size)
	}
	c.own.give(size)
}

func (c *Conn) serve(f *frame) {
	defer c.serving.Done()
	defer c.release(int64(len(f.body)))
	reply := c.handler(Message{Body: f.body, FDs: f.fds, Conn: c})
	defer closeFDs(reply.FDs)
	if err := c.send(&frame{id: f.id, kind: kindResponse, body: reply.Body, fds: reply.FDs}, c.limits.ReplyTimeout); err != nil {
		c.fail(err)
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
