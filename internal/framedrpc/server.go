package framedrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/internal/pollread"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// helloTimeout bounds how long an accepted connection may take to send
// its opening bytes.
const helloTimeout = 10 * time.Second

// method is one registered unary method.
type method struct {
	impl    any
	handler grpc.MethodHandler
}

// Server answers framed calls with the handlers of registered services.
// Register every service, and set IdleTimeout, before serving.
type Server struct {
	// IdleTimeout, when positive, closes a connection on which no call
	// arrived for that long (the client dials again on its next call).
	IdleTimeout time.Duration

	log     *slog.Logger
	methods map[string]method

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closing bool
	wg      sync.WaitGroup
}

// NewServer returns a server with no services; log receives connection
// errors (slog.Default() when nil).
func NewServer(log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{log: log, methods: map[string]method{}, conns: map[net.Conn]struct{}{}}
}

// RegisterService adds the unary methods of desc, served by impl; it
// implements grpc.ServiceRegistrar. A service with streaming methods
// cannot be carried and panics, as registering a bad service with gRPC
// does.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	if len(desc.Streams) > 0 {
		panic(fmt.Sprintf("framedrpc: service %s has streaming methods, which framed calls cannot carry", desc.ServiceName))
	}
	for _, m := range desc.Methods {
		s.methods["/"+desc.ServiceName+"/"+m.MethodName] = method{impl: impl, handler: m.Handler}
	}
}

// Split serves the connections of ln that open with Magic and returns a
// listener that yields every other connection, with its first bytes
// intact, for grpc.Server.Serve. Closing the returned listener closes ln.
func (s *Server) Split(ln net.Listener) net.Listener {
	rest := &splitListener{Listener: ln, conns: make(chan net.Conn), done: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				rest.fail(err)
				return
			}
			go s.route(c, rest)
		}
	}()
	return rest
}

// route reads a connection's first bytes and hands it to the framed
// server or to the other listener.
func (s *Server) route(c net.Conn, rest *splitListener) {
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	head := make([]byte, len(Magic))
	n, err := io.ReadFull(c, head)
	_ = c.SetReadDeadline(time.Time{})
	if err == nil && string(head) == Magic {
		s.ServeConn(c)
		return
	}
	rest.hand(&prefixedConn{Conn: c, prefix: head[:n]})
}

// ServeConn serves one connection whose Magic has been read already, until
// the client closes it, breaks the protocol, or the server closes.
func (s *Server) ServeConn(c net.Conn) {
	if !s.track(c) {
		c.Close()
		return
	}
	defer s.untrack(c)
	if err := s.serve(c); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
		s.log.Warn("framed RPC connection closed", "remote", c.RemoteAddr().String(), "err", err)
	}
}

func (s *Server) serve(c net.Conn) error {
	rw := pollread.NewRawIO(c)
	fr := newFrameReader(rw)
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	md, err := readHello(fr.r)
	if err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Time{})
	if s.isClosing() {
		return nil
	}
	if _, err := rw.Write([]byte(Magic)); err != nil {
		return err
	}
	p := &peer.Peer{Addr: c.RemoteAddr(), LocalAddr: c.LocalAddr()}
	if st, ok := tlsconf.State(c); ok {
		p.AuthInfo = tlsconf.AuthInfo(st)
	}
	ctx := peer.NewContext(context.Background(), p)
	if len(md) > 0 {
		ctx = metadata.NewIncomingContext(ctx, metadata.New(md))
	}
	var out []byte
	for {
		if s.IdleTimeout > 0 {
			_ = c.SetReadDeadline(time.Now().Add(s.IdleTimeout))
		}
		f, err := fr.next()
		if err != nil {
			return err
		}
		if f.kind != kindCall {
			return fmt.Errorf("%w: kind %d from a client", errBadFrame, f.kind)
		}
		out, err = s.answer(ctx, string(f.method), f.body, out[:0])
		if err != nil {
			return err
		}
		if _, err := rw.Write(out); err != nil {
			return err
		}
		if cap(out) > keepBuffer {
			out = nil
		}
	}
}

// answer runs one call and encodes its reply or error frame into out.
func (s *Server) answer(ctx context.Context, name string, req []byte, out []byte) ([]byte, error) {
	m, ok := s.methods[name]
	var reply any
	var err error
	if !ok {
		err = status.Errorf(codes.Unimplemented, "unknown method %s", name)
	} else {
		reply, err = m.handler(m.impl, ctx, func(msg any) error {
			if err := proto.Unmarshal(req, msg.(proto.Message)); err != nil {
				return status.Errorf(codes.Internal, "decode %s request: %v", name, err)
			}
			return nil
		}, nil)
	}
	msg, isMsg := reply.(proto.Message)
	if err == nil && !isMsg {
		err = status.Errorf(codes.Internal, "%s returned no reply message", name)
	}
	if err == nil {
		out = appendHeader(out, kindReply, "")
		if out, err = (proto.MarshalOptions{}).MarshalAppend(out, msg); err == nil {
			if out, err = finishFrame(out); err == nil {
				return out, nil
			}
		}
		err = status.Errorf(codes.Internal, "encode %s reply: %v", name, err)
	}
	out, merr := (proto.MarshalOptions{}).MarshalAppend(appendHeader(out[:0], kindError, ""), status.Convert(err).Proto())
	if merr != nil {
		return nil, merr
	}
	return finishFrame(out)
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Close stops serving: it refuses new connections, lets every call that is
// being answered finish and send its reply, closes the connections and
// waits for their goroutines. Listeners given to Split are closed by their
// owner.
func (s *Server) Close() {
	s.mu.Lock()
	s.closing = true
	for c := range s.conns {
		// A connection waiting for its next call wakes now; one in a
		// call finds the deadline passed when it reads again.
		_ = c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// splitListener yields the connections Split did not serve itself.
type splitListener struct {
	net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	err   error
}

func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	}
}

// hand passes c to Accept, or closes it once the listener is closed.
func (l *splitListener) hand(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

// fail ends Accept with err (the underlying listener's).
func (l *splitListener) fail(err error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		close(l.done)
	})
}

func (l *splitListener) Close() error {
	err := l.Listener.Close()
	l.fail(net.ErrClosed)
	return err
}

// prefixedConn replays the bytes read while routing before the rest of
// the stream.
type prefixedConn struct {
	net.Conn
	prefix []byte
}

// NetConn returns the connection it wraps (as *tls.Conn's NetConn does),
// so its TLS state can be found (tlsconf.State).
func (c *prefixedConn) NetConn() net.Conn { return c.Conn }

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
