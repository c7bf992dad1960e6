// Package rpcmsg is the message facility behind mooncake.engine's
// RpcInterface: a server receives typed messages (opaque bytes, a kind
// byte the caller defines) from clients over TCP and queues them for the
// application, and a client sends a message and waits for the server's
// acknowledgement that it was queued.
//
// Wire format (little-endian), one exchange per message on a pooled
// connection: the client sends kind u8, length u64 and length payload
// bytes; the server answers a status i32 (0 queued, -1 refused: too
// large). It is our own format: upstream's coro_rpc wire does not
// interoperate.
package rpcmsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// DefaultMaxMessage bounds one message's payload unless Server.MaxMessage
// says otherwise.
const DefaultMaxMessage = 1 << 30

// Message is one message as the server received it.
type Message struct {
	Kind   byte
	Source string // the sender's address (host:port of its connection)
	Data   []byte
}

// ErrClosed is returned by Server.Next once the server is stopped.
var ErrClosed = errors.New("rpcmsg: server closed")

// Server accepts connections and queues the messages they carry.
type Server struct {
	ln      net.Listener
	max     uint64
	queue   chan Message
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
	stopped bool
}

// Listen starts a server on addr ("host:port"; port 0 picks a free one).
// Up to queueLen messages wait in the queue; senders block (and time out)
// beyond that. maxMessage 0 means DefaultMaxMessage.
func Listen(addr string, queueLen int, maxMessage uint64) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rpcmsg: listen on %s: %w", addr, err)
	}
	if maxMessage == 0 {
		maxMessage = DefaultMaxMessage
	}
	s := &Server{ln: ln, max: maxMessage, queue: make(chan Message, max(queueLen, 1)),
		stop: make(chan struct{}), conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// serve reads messages from one connection until it closes.
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	for {
		kind, data, err := readMessage(c, s.max)
		if errors.Is(err, errTooLarge) {
			writeStatus(c, -1)
			return
		}
		if err != nil {
			return
		}
		select {
		case s.queue <- Message{Kind: kind, Source: c.RemoteAddr().String(), Data: data}:
		case <-s.stop:
			return
		}
		if writeStatus(c, 0) != nil {
			return
		}
	}
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
	mu       sync.Mutex
	idle     map[string][]net.Conn
}

// NewClient returns a client whose every send (connect, write, wait for
// the acknowledgement) is bounded by timeout.
func NewClient(poolSize int, timeout time.Duration) *Client {
	return &Client{timeout: timeout, poolSize: max(poolSize, 1), idle: map[string][]net.Conn{}}
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
	if l := c.idle[target]; len(l) > 0 {
		conn := l[len(l)-1]
		c.idle[target] = l[:len(l)-1]
		c.mu.Unlock()
		return conn, nil
	}
	c.mu.Unlock()
	conn, err := net.DialTimeout("tcp", target, c.timeout)
	if err != nil {
		return nil, fmt.Errorf("rpcmsg: connect to %s: %w", target, err)
	}
	return conn, nil
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
