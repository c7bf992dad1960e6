package zmtp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// handshakeTimeout bounds a new connection's greeting and READY exchange.
const handshakeTimeout = 5 * time.Second

// Listen binds a ZeroMQ-style endpoint: tcp://HOST:PORT (HOST may be * or
// 0.0.0.0 for every interface, PORT 0 for a free one) or ipc://PATH. It is
// the parser of the endpoint flags, so it rejects anything else with an
// error naming the endpoint.
func Listen(endpoint string) (net.Listener, error) {
	scheme, addr, ok := strings.Cut(endpoint, "://")
	if !ok || addr == "" {
		return nil, fmt.Errorf("zmtp: endpoint %q: want tcp://HOST:PORT or ipc://PATH", endpoint)
	}
	switch scheme {
	case "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil || port == "" {
			return nil, fmt.Errorf("zmtp: endpoint %q: want tcp://HOST:PORT", endpoint)
		}
		if host == "*" {
			host = ""
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
		if err != nil {
			return nil, fmt.Errorf("zmtp: bind %s: %w", endpoint, err)
		}
		return ln, nil
	case "ipc":
		ln, err := net.Listen("unix", addr)
		if err != nil {
			return nil, fmt.Errorf("zmtp: bind %s: %w", endpoint, err)
		}
		return ln, nil
	default:
		return nil, fmt.Errorf("zmtp: endpoint %q: transport %q is not supported (tcp or ipc)", endpoint, scheme)
	}
}

// Endpoint returns a bound address as a ZeroMQ endpoint (tcp://IP:PORT
// or ipc://PATH), for logs and for tests that bound port 0.
func Endpoint(a net.Addr) string {
	if a.Network() == "unix" {
		return "ipc://" + a.String()
	}
	return "tcp://" + a.String()
}

// peerConn is one handshaken connection.
type peerConn struct {
	c     net.Conn
	r     *bufio.Reader
	props map[string]string
}

// prop returns a READY property, matching its name without case (RFC 23).
func (p *peerConn) prop(name string) string {
	for k, v := range p.props {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// handshake exchanges greetings and READY commands on c as socketType,
// accepting peers whose Socket-Type is in accept.
func handshake(c net.Conn, socketType string, accept []string) (*peerConn, error) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write(greeting()); err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(c, 4096)
	g := make([]byte, greetingLen)
	if _, err := io.ReadFull(r, g); err != nil {
		return nil, err
	}
	if err := checkGreeting(g); err != nil {
		return nil, err
	}
	if _, err := c.Write(readyCommand(map[string]string{"Socket-Type": socketType}, "Socket-Type")); err != nil {
		return nil, err
	}
	f, err := readFrame(r, 4096)
	if err != nil {
		return nil, err
	}
	if !f.command {
		return nil, protoErr("expected READY, got a message frame")
	}
	cmd, err := parseCommand(f.body)
	if err != nil {
		return nil, err
	}
	if cmd.name == "ERROR" {
		return nil, protoErr("peer refused the handshake: %q", cmd.data)
	}
	if cmd.name != "READY" {
		return nil, protoErr("expected READY, got %q", cmd.name)
	}
	props, err := parseProperties(cmd.data)
	if err != nil {
		return nil, err
	}
	p := &peerConn{c: c, r: r, props: props}
	st := strings.ToUpper(p.prop("Socket-Type"))
	for _, a := range accept {
		if st == a {
			return p, nil
		}
	}
	_, _ = c.Write(encodeCommand("ERROR", append([]byte{byte(len("socket type mismatch"))}, "socket type mismatch"...)))
	return nil, protoErr("a %s socket cannot talk to a %q peer", socketType, st)
}

// server is the accept loop and peer registry PUB and ROUTER share.
type server struct {
	ln         net.Listener
	socketType string
	accept     []string
	log        *slog.Logger
	serve      func(*peerConn)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func (s *server) start() {
	s.conns = map[net.Conn]struct{}{}
	s.wg.Add(1)
	go s.acceptLoop()
}

func (s *server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("zmtp: accept failed", "socket", s.socketType, "err", err)
			}
			return
		}
		if !s.track(c) {
			_ = c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			p, err := handshake(c, s.socketType, s.accept)
			if err != nil {
				s.log.Debug("zmtp: handshake failed", "socket", s.socketType, "remote", c.RemoteAddr(), "err", err)
				return
			}
			s.serve(p)
		}()
	}
}

func (s *server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *server) untrack(c net.Conn) {
	_ = c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// close stops accepting, closes every connection and waits for their
// goroutines.
func (s *server) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}
