package framedrpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echo is a one-method test service: it answers its request's value,
// prefixed by the caller's "tenant" metadata; "fail" is an error,
// "block" waits until release is closed, "nil" returns neither a reply
// nor an error.
type echo struct{ release chan struct{} }

func (e *echo) handle(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	switch in.Value {
	case "fail":
		return nil, status.Error(codes.NotFound, "no such thing")
	case "block":
		<-e.release
	case "whoami": // the TLS client certificate's name, as a peer check would read it
		p, _ := peer.FromContext(ctx)
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			return wrapperspb.String(ti.State.PeerCertificates[0].Subject.CommonName), nil
		}
		return wrapperspb.String("anonymous"), nil
	}
	tenant := ""
	if v := metadata.ValueFromIncomingContext(ctx, "tenant"); len(v) > 0 {
		tenant = v[0] + ":"
	}
	return wrapperspb.String(tenant + in.Value), nil
}

const echoMethod = "/test.Echo/Echo"

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			if in.Value == "nil" {
				return nil, nil // a broken handler: no reply and no error
			}
			return srv.(*echo).handle(ctx, in)
		},
	}},
}

// serve starts a framed server (and a gRPC server on the same port) for
// the echo service; both stop at the end of the test.
func serve(t *testing.T) (addr string, e *echo, srv *Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e = &echo{release: make(chan struct{})}
	srv = NewServer(nil)
	srv.RegisterService(&echoDesc, e)
	g := grpc.NewServer()
	g.RegisterService(&echoDesc, e)
	go g.Serve(srv.Split(ln))
	t.Cleanup(func() {
		select {
		case <-e.release:
		default:
			close(e.release)
		}
		g.Stop()
		srv.Close()
	})
	return ln.Addr().String(), e, srv
}

func dial(t *testing.T, addr string, md map[string]string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), addr, Options{Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func call(c grpc.ClientConnInterface, v string) (string, error) {
	out := new(wrapperspb.StringValue)
	err := c.Invoke(context.Background(), echoMethod, wrapperspb.String(v), out)
	return out.Value, err
}

func TestCallsCarryRepliesErrorsAndMetadata(t *testing.T) {
	addr, _, _ := serve(t)
	c := dial(t, addr, map[string]string{"tenant": "t1"})
	if got, err := call(c, "hello"); err != nil || got != "t1:hello" {
		t.Fatalf("echo = %q, %v; want t1:hello", got, err)
	}
	_, err := call(c, "fail")
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "no such thing" {
		t.Fatalf("fail = %v; want NotFound 'no such thing'", err)
	}
	err = c.Invoke(context.Background(), "/test.Echo/Nope", wrapperspb.String("x"), new(wrapperspb.StringValue))
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method = %v; want Unimplemented", err)
	}
	if _, err := call(c, "nil"); status.Code(err) != codes.Internal {
		t.Fatalf("a handler without a reply = %v; want Internal", err)
	}
	// The connection is still in step after an error reply.
	if got, err := call(c, "again"); err != nil || got != "t1:again" {
		t.Fatalf("after errors: %q, %v", got, err)
	}
	if len(c.idle) != 1 {
		t.Fatalf("%d idle connections after sequential calls, want 1", len(c.idle))
	}
}

func TestConcurrentCallsUseAConnectionEach(t *testing.T) {
	addr, _, _ := serve(t)
	c := dial(t, addr, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				v := fmt.Sprintf("g%d-%d", g, i)
				if got, err := call(c, v); err != nil || got != v {
					errs <- fmt.Errorf("call %s = %q, %v", v, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(c.idle); n < 1 || n > 8 {
		t.Fatalf("%d idle connections after 8 concurrent callers", n)
	}
}

func TestGRPCAndFramedShareAPort(t *testing.T) {
	addr, _, _ := serve(t)
	g, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "tenant", "g")
	out := new(wrapperspb.StringValue)
	if err := g.Invoke(ctx, echoMethod, wrapperspb.String("x"), out); err != nil || out.Value != "g:x" {
		t.Fatalf("gRPC on the shared port: %q, %v", out.Value, err)
	}
	if got, err := call(dial(t, addr, nil), "y"); err != nil || got != "y" {
		t.Fatalf("framed on the shared port: %q, %v", got, err)
	}
}

func TestDialReportsAServerThatIsNotFramed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	go g.Serve(ln)
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Dial(ctx, ln.Addr().String(), Options{}); !errors.Is(err, ErrNotFramed) {
		t.Fatalf("Dial to a plain gRPC server = %v; want ErrNotFramed", err)
	}
}

func TestDeadlineEndsTheWaitAndDropsTheConnection(t *testing.T) {
	addr, e, _ := serve(t)
	c := dial(t, addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Invoke(ctx, echoMethod, wrapperspb.String("block"), new(wrapperspb.StringValue))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("blocked call = %v; want DeadlineExceeded", err)
	}
	close(e.release)
	if got, err := call(c, "next"); err != nil || got != "next" {
		t.Fatalf("call after a deadline: %q, %v", got, err)
	}
}

func TestClientCloseFailsCallsInFlight(t *testing.T) {
	addr, _, _ := serve(t)
	c := dial(t, addr, nil)
	done := make(chan error, 1)
	go func() {
		_, err := call(c, "block")
		done <- err
	}()
	for {
		c.mu.Lock()
		n := len(c.inUse)
		c.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	c.Close()
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call in flight at Close = %v; want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call in flight did not return after Close")
	}
	if _, err := call(c, "late"); status.Code(err) != codes.Canceled {
		t.Fatalf("call after Close = %v; want Canceled", err)
	}
}

func TestServerCloseLetsACallFinish(t *testing.T) {
	addr, e, srv := serve(t)
	c := dial(t, addr, nil)
	done := make(chan error, 1)
	go func() {
		got, err := call(c, "block")
		if err == nil && got != "block" {
			err = fmt.Errorf("reply %q", got)
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the call reach the handler
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a call was being answered")
	case <-time.After(50 * time.Millisecond):
	}
	close(e.release)
	if err := <-done; err != nil {
		t.Fatalf("call in flight at server Close: %v", err)
	}
	<-closed
}

func TestReusedConnectionToARestartedServerIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	start := func(ln net.Listener) *Server {
		s := NewServer(nil)
		s.RegisterService(&echoDesc, &echo{})
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					head := make([]byte, len(Magic))
					if _, err := io.ReadFull(conn, head); err == nil {
						s.ServeConn(conn)
					}
				}()
			}
		}()
		return s
	}
	first := start(ln)
	c := dial(t, addr, nil)
	if _, err := call(c, "one"); err != nil {
		t.Fatal(err)
	}
	ln.Close()
	first.Close()
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s not free again: %v", addr, err)
	}
	defer ln2.Close()
	second := start(ln2)
	defer second.Close()
	if got, err := call(c, "two"); err != nil || got != "two" {
		t.Fatalf("call through a connection the old server closed: %q, %v", got, err)
	}
}

func TestReusedConnectionResetByTheServerIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := NewServer(nil)
	s.RegisterService(&echoDesc, &echo{})
	defer s.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- conn
			go func() {
				head := make([]byte, len(Magic))
				if _, err := io.ReadFull(conn, head); err == nil {
					s.ServeConn(conn)
				}
			}()
		}
	}()
	c := dial(t, ln.Addr().String(), nil)
	if _, err := call(c, "one"); err != nil {
		t.Fatal(err)
	}
	first := (<-accepted).(*net.TCPConn)
	if err := first.SetLinger(0); err != nil { // close with a reset, not a FIN
		t.Fatal(err)
	}
	first.Close()
	time.Sleep(20 * time.Millisecond) // let the reset reach the client's socket
	if got, err := call(c, "two"); err != nil || got != "two" {
		t.Fatalf("call through a connection the server reset: %q, %v", got, err)
	}
}

// rawConn opens a connection and sends the hello by hand.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hello, _ := encodeHello(nil)
	if _, err := conn.Write(hello); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, len(Magic))
	if _, err := io.ReadFull(conn, ack); err != nil || string(ack) != Magic {
		t.Fatalf("accept = %q, %v", ack, err)
	}
	return conn
}

func header(body uint32, kind, flags byte, method uint16) []byte {
	h := make([]byte, headerLen)
	binary.LittleEndian.PutUint32(h, body)
	h[4], h[5] = kind, flags
	binary.LittleEndian.PutUint16(h[6:], method)
	return h
}

func TestBadFramesCloseTheConnectionOnly(t *testing.T) {
	addr, _, _ := serve(t)
	good := dial(t, addr, nil)
	cases := map[string][]byte{
		"unknown kind":      header(0, 9, 0, 0),
		"reply from client": header(0, kindReply, 0, 0),
		"oversized body":    header(MaxBody+1, kindCall, 0, 0),
		"method past body":  header(2, kindCall, 0, 3),
		"flags set":         header(0, kindCall, 1, 0),
		"truncated header":  {1, 0, 0},
		"truncated body":    append(header(100, kindCall, 0, 0), "short"...),
	}
	for name, b := range cases {
		conn := rawConn(t, addr)
		conn.Write(b)
		if tc, ok := conn.(*net.TCPConn); ok && strings.HasPrefix(name, "truncated") {
			tc.CloseWrite()
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(make([]byte, 64))
		if n != 0 || (err != io.EOF && !errors.Is(err, net.ErrClosed) && !isReset(err)) {
			t.Errorf("%s: read %d bytes, %v; want the connection closed", name, n, err)
		}
		conn.Close()
		if got, err := call(good, name); err != nil || got != name {
			t.Fatalf("after %s: another client's call = %q, %v", name, got, err)
		}
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

func TestHelloRejectsBadMetadata(t *testing.T) {
	for name, b := range map[string][]byte{
		"truncated length":  {1, 0},
		"too long":          binary.LittleEndian.AppendUint32(nil, maxHello+1),
		"field past end":    append(binary.LittleEndian.AppendUint32(nil, 3), 9, 0, 'k'),
		"key without value": append(binary.LittleEndian.AppendUint32(nil, 3), 1, 0, 'k'),
	} {
		if _, err := readHello(bytes.NewReader(b)); !errors.Is(err, errBadFrame) {
			t.Errorf("%s: %v; want errBadFrame", name, err)
		}
	}
	b, err := encodeHello(map[string]string{"a": "1", "bb": ""})
	if err != nil {
		t.Fatal(err)
	}
	md, err := readHello(bytes.NewReader(b[len(Magic):]))
	if err != nil || len(md) != 2 || md["a"] != "1" || md["bb"] != "" {
		t.Fatalf("round trip = %v, %v", md, err)
	}
}

// FuzzServerConnection feeds arbitrary bytes after a valid hello: the
// server never panics, answers or closes, and keeps serving others.
func FuzzServerConnection(f *testing.F) {
	req, _ := finishFrame(append(appendHeader(nil, kindCall, echoMethod), 0x0a, 0x01, 'x'))
	f.Add(req)
	f.Add(header(5, kindCall, 0, 0))
	f.Add(append(req, req[:5]...))
	f.Add([]byte{})
	srv := NewServer(slog.New(slog.DiscardHandler))
	released := make(chan struct{})
	close(released) // a fuzzed "block" call must not hang
	srv.RegisterService(&echoDesc, &echo{release: released})
	f.Fuzz(func(t *testing.T, b []byte) {
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() { srv.ServeConn(server); close(done) }()
		hello, _ := encodeHello(nil)
		go func() {
			client.Write(hello[len(Magic):]) // ServeConn is called after the magic
			client.Write(b)
			client.Close()
		}()
		io.Copy(io.Discard, client)
		<-done
	})
}
