// Package rpcmsg is the message facility behind mooncake.engine's
// RpcInterface: a server receives typed messages (opaque bytes, a kind
// byte the caller defines) from clients over TCP and queues them for the
// application, and a client sends a message and waits for the server's
// acknowledgement that it was queued.
//
// Wire format (little-endian), one exchange per message on a pooled
// connection: the client sends kind u8, length u64 and length payload
// bytes; the server answers a status i32 (0 queued, -1 refused: too
// large). A server closes a connection on which nothing arrives for its
// IdleTimeout and holds at most MaxConns connections (MaxConnsPerHost from
// one address); a client skips pooled connections the server has closed. It is our own format: upstream's coro_rpc wire does not
// interoperate.
package rpcmsg

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

// DefaultMaxMessage bounds one message's payload unless Config.MaxMessage
// says otherwise.
const DefaultMaxMessage = 1 << 30

// Defaults of what a server holds for its peers (Config).
const (
	// DefaultIdleTimeout is how long a connection may go without a byte
	// arriving, between messages or within one, before it is closed.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxConns bounds the connections a server holds at once.
	DefaultMaxConns = 4096
	// DefaultMaxConnsPerHost bounds those from one IP address.
	DefaultMaxConnsPerHost = 512
)

// Message is one message as the server received it.
type Message struct {
	Kind   byte
	Source string // the sender's address (host:port of its connection)
	Data   []byte
}

// ErrClosed is returned by Server.Next once the server is stopped.
var ErrClosed = errors.New("rpcmsg: server closed")

// Config is a server's settings; zero fields take the defaults.
type Config struct {
	// QueueLen is how many messages wait for Next; senders block (and
	// time out) beyond that.
	QueueLen int
	// MaxMessage bounds one message's payload (DefaultMaxMessage).
	MaxMessage uint64
	// IdleTimeout closes a connection on which nothing arrives for that
	// long, and bounds the write of each acknowledgement
	// (DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxConns and MaxConnsPerHost bound the connections held at once,
	// in all and from one IP address; one beyond is closed as soon as it
	// is accepted (DefaultMaxConns, DefaultMaxConnsPerHost).
	MaxConns, MaxConnsPerHost int
	// TLS, when not nil, serves TLS with it (mutual when it requires
	// client certificates); the handshake falls under IdleTimeout.
	TLS *tls.Config
}

func (c Config) withDefaults() Config {
	c.QueueLen = max(c.QueueLen, 1)
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConnsPerHost <= 0 {
		c.MaxConnsPerHost = DefaultMaxConnsPerHost
	}
	return c
}

// Stats is what a server counts of its connections.
type Stats struct {
	// Conns is how many connections it holds now.
	Conns int
	// Refused counts connections closed at accept because MaxConns or
	// MaxConnsPerHost were reached.
	Refused uint64
	// IdleClosed counts connections closed because nothing arrived on
	// them for IdleTimeout.
	IdleClosed uint64
}

// Server accepts connections and queues the messages they carry.
type Server struct {
	ln      net.Listener
	cfg     Config
	queue   chan Message
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
	perHost map[string]int // connections held per remote IP
	stopped bool

	refused, idleClosed atomic.Uint64
}

// Listen starts a server on addr ("host:port"; port 0 picks a free one)
// with the default limits. Up to queueLen messages wait in the queue;
// senders block (and time out) beyond that. maxMessage 0 means
// DefaultMaxMessage.
func Listen(addr string, queueLen int, maxMessage uint64) (*Server, error) {
	return ListenConfig(addr, Config{QueueLen: queueLen, MaxMessage: maxMessage})
}

// ListenConfig starts a server on addr with cfg.
func ListenConfig(addr string, cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rpcmsg: listen on %s: %w", addr, err)
	}
	cfg = cfg.withDefaults()
	s := &Server{ln: tlsconf.Listen(ln, cfg.TLS), cfg: cfg, queue: make(chan Message, cfg.QueueLen),
		stop: make(chan struct{}), conns: map[net.Conn]bool{}, perHost: map[string]int{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Stats returns the server's connection counts.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return Stats{Conns: n, Refused: s.refused.Load(), IdleClosed: s.idleClosed.Load()}
}

// hostOf is the IP address a connection came from.
func hostOf(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		host := hostOf(c)
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			c.Close()
			return
		}
		if len(s.conns) >= s.cfg.MaxConns || s.perHost[host] >= s.cfg.MaxConnsPerHost {
			s.mu.Unlock()
			s.refused.Add(1)
			c.Close()
			continue
		}
		s.conns[c] = true
		s.perHost[host]++
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c, host)
	}
}

// serve reads messages from one connection until it closes.
func (s *Server) serve(c net.Conn, host string) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		if s.perHost[host]--; s.perHost[host] == 0 {
			delete(s.perHost, host)
		}
		s.mu.Unlock()
		c.Close()
	}()
	r := idleReader{c: c, timeout: s.cfg.IdleTimeout}
	for {
		kind, data, err := readMessage(r, s.cfg.MaxMessage)
		if errors.Is(err, errTooLarge) {
			s.writeStatus(c, -1)
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.idleClosed.Add(1)
		}
		if err != nil {
			return
		}
		select {
		case s.queue <- Message{Kind: kind, Source: c.RemoteAddr().String(), Data: data}:
		case <-s.stop:
			return
		}
		if s.writeStatus(c, 0) != nil {
			return
		}
	}
}

// idleReader reads from a connection, failing a read on which nothing
// arrives within timeout.
type idleReader struct {
	c       net.Conn
	timeout time.Duration
}

func (r idleReader) Read(p []byte) (int, error) {
	if err := r.c.SetReadDeadline(time.Now().Add(r.timeout)); err != nil {
		return 0, err
	}
	return r.c.Read(p)
}

func (s *Server) writeStatus(c net.Conn, status int32) error {
	if err := c.SetWriteDeadline(time.Now().Add(s.cfg.IdleTimeout)); err != nil {
		return err
	}
	return writeStatus(c, status)
}

func writeStatus(c net.Conn, status int32) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(status))
	_, err := c.Write(b[:])
	return err
}

// Next waits up to timeout for the next message. ok is false on a
// timeout; err is ErrClosed once the server is stopped.
func (s *Server) Next(timeout time.Duration) (m Message, ok bool, err error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.stop:
		return Message{}, false, ErrClosed
	default:
	}
	select {
	case m = <-s.queue:
		return m, true, nil
	case <-s.stop:
		return Message{}, false, ErrClosed
	case <-t.C:
		return Message{}, false, nil
	}
}

// Close stops accepting, drops open connections and wakes Next; messages
// still queued are discarded.
func (s *Server) Close() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	close(s.stop)
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Client sends messages, keeping up to PoolSize idle connections per
// target. Safe for concurrent use.
type Client struct {
	timeout  time.Duration
	poolSize int
	tls      *tls.Config
	mu       sync.Mutex
	idle     map[string][]net.Conn
}

// NewClient returns a client whose every send (connect, write, wait for
// the acknowledgement) is bounded by timeout.
func NewClient(poolSize int, timeout time.Duration) *Client {
	return NewClientTLS(poolSize, timeout, nil)
}

// NewClientTLS is NewClient whose connections run TLS with cfg (nil:
// plain TCP); a server's name is its target's host.
func NewClientTLS(poolSize int, timeout time.Duration, cfg *tls.Config) *Client {
	return &Client{timeout: timeout, poolSize: max(poolSize, 1), tls: cfg, idle: map[string][]net.Conn{}}
}

// Send delivers one message to the server at target and waits until the
// server has queued it.
func (c *Client) Send(target string, kind byte, data []byte) error {
	conn, err := c.conn(target)
	if err != nil {
		return err
	}
	conn.SetDeadline(time.Now().Add(c.timeout))
	var status [4]byte
	if _, err = conn.Write(encodeMessage(kind, data)); err == nil {
		_, err = io.ReadFull(conn, status[:])
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("rpcmsg: send to %s: %w", target, err)
	}
	if st := int32(binary.LittleEndian.Uint32(status[:])); st != 0 {
		conn.Close()
		return fmt.Errorf("rpcmsg: %s refused the message (status %d: larger than it accepts)", target, st)
	}
	c.release(target, conn)
	return nil
}

func (c *Client) conn(target string) (net.Conn, error) {
	c.mu.Lock()
	for l := c.idle[target]; len(l) > 0; l = c.idle[target] {
		conn := l[len(l)-1]
		c.idle[target] = l[:len(l)-1]
		if open(conn) {
			c.mu.Unlock()
			return conn, nil
		}
		conn.Close() // the server closed it while it was idle (its IdleTimeout)
	}
	c.mu.Unlock()
	conn, err := net.DialTimeout("tcp", target, c.timeout)
	if err != nil {
		return nil, fmt.Errorf("rpcmsg: connect to %s: %w", target, err)
	}
	return tlsconf.Client(conn, c.tls, target), nil
}

// open says whether the server has not closed an idle pooled connection:
// nothing is waiting to be read on it, not even the end of the stream (or,
// under TLS, the server's close_notify).
func open(conn net.Conn) bool {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, perr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		alive = perr == unix.EAGAIN
		return true
	})
	return err == nil && alive
}

func (c *Client) release(target string, conn net.Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle[target]) >= c.poolSize {
		conn.Close()
		return
	}
	c.idle[target] = append(c.idle[target], conn)
}

// Close closes the idle connections.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, l := range c.idle {
		for _, conn := range l {
			conn.Close()
		}
		delete(c.idle, t)
	}
}
