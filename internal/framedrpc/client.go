package framedrpc

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/internal/pollread"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"golang.org/x/sys/unix"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// ErrNotFramed is returned by Dial when the server does not answer the
// framed hello (it speaks another protocol, such as plain gRPC).
var ErrNotFramed = errors.New("framedrpc: the server does not speak the framed protocol")

// maxIdle is how many idle connections a Client keeps for reuse.
const maxIdle = 16

// Client sends unary calls to one server over framed connections: one
// call at a time per connection, as many connections as calls in flight,
// up to maxIdle of them kept open between calls. It implements
// grpc.ClientConnInterface, so a generated gRPC client runs over it.
type Client struct {
	addr  string
	hello []byte
	busy  pollread.Busy
	tls   *tls.Config

	mu     sync.Mutex
	idle   []*clientConn
	inUse  map[*clientConn]struct{}
	closed bool
}

// clientConn is one framed connection.
type clientConn struct {
	s    *pollread.Conn
	w    io.Writer // s, or TLS over s
	fr   *frameReader
	out  []byte
	dead atomic.Bool // aborted because a call's context ended
}

// Options are a Client's settings.
type Options struct {
	// Metadata (such as a tenant id) is sent as the incoming gRPC metadata
	// of every call.
	Metadata map[string]string
	// Busy is how a call waits for its reply before sleeping in poll(2).
	Busy pollread.Busy
	// TLS, when not nil, runs every connection over TLS with it; the
	// server's name is the address's host unless it names one.
	TLS *tls.Config
}

// Dial connects to addr. The first connection is opened now, so a server
// that does not speak the protocol is reported (ErrNotFramed) before any
// call is made.
func Dial(ctx context.Context, addr string, o Options) (*Client, error) {
	hello, err := encodeHello(o.Metadata)
	if err != nil {
		return nil, err
	}
	c := &Client{addr: addr, hello: hello, busy: o.Busy, tls: tlsconf.ForAddr(o.TLS, addr), inUse: map[*clientConn]struct{}{}}
	cc, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.idle = append(c.idle, cc)
	return c, nil
}

// dial opens and greets one connection.
func (c *Client) dial(ctx context.Context) (*clientConn, error) {
	sc, err := pollread.Dial(ctx, c.addr)
	if err != nil {
		return nil, err
	}
	cc := &clientConn{s: sc, w: sc, fr: newFrameReader(sc)}
	sc.SetBusy(c.busy)
	sc.SetContext(ctx)
	defer sc.SetContext(context.Background())
	stop := context.AfterFunc(ctx, sc.Abort)
	defer stop()
	if c.tls != nil {
		tc := tls.Client(socketConn{sc}, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			sc.Release()
			return nil, fmt.Errorf("framedrpc: TLS with %s: %w", c.addr, err)
		}
		cc.w, cc.fr = tc, newFrameReader(tc)
	}
	ack := make([]byte, len(Magic))
	if _, err = cc.w.Write(c.hello); err == nil {
		_, err = io.ReadFull(cc.fr.r, ack)
	}
	switch {
	case ctx.Err() != nil:
		sc.Release()
		return nil, ctx.Err()
	case err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
		sc.Release()
		return nil, fmt.Errorf("framedrpc: greet %s: %w", c.addr, err)
	case err != nil || !bytes.Equal(ack, []byte(Magic)):
		sc.Release()
		return nil, fmt.Errorf("%w (%s)", ErrNotFramed, c.addr)
	}
	return cc, nil
}

// get returns an idle connection (reused) or a new one.
func (c *Client) get(ctx context.Context) (cc *clientConn, reused bool, err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, status.Error(codes.Canceled, "framedrpc: client closed")
	}
	if n := len(c.idle); n > 0 {
		cc = c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.inUse[cc] = struct{}{}
		c.mu.Unlock()
		return cc, true, nil
	}
	c.mu.Unlock()
	if cc, err = c.dial(ctx); err != nil {
		return nil, false, status.Errorf(codes.Unavailable, "framedrpc: connect %s: %v", c.addr, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cc.s.Release()
		return nil, false, status.Error(codes.Canceled, "framedrpc: client closed")
	}
	c.inUse[cc] = struct{}{}
	return cc, false, nil
}

// put returns a connection after a call: kept when healthy and there is
// room, closed otherwise.
func (c *Client) put(cc *clientConn, healthy bool) {
	c.mu.Lock()
	delete(c.inUse, cc)
	if healthy && !cc.dead.Load() && !c.closed && len(c.idle) < maxIdle {
		c.idle = append(c.idle, cc)
		cc = nil
	}
	c.mu.Unlock()
	if cc != nil {
		cc.s.Release()
	}
}

// Invoke sends one call and waits for its reply; it implements
// grpc.ClientConnInterface. The context's deadline and cancellation end
// the wait (the connection is then dropped, since its reply may still
// come). Transport failures are codes.Unavailable, as gRPC reports them;
// a call whose reused connection turns out to have been closed by the
// server before it read anything is sent again once on a new connection.
// Call options other than grpc.StaticMethod (which generated code
// passes) are not supported.
func (c *Client) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	for _, o := range opts {
		if _, ok := o.(grpc.StaticMethodCallOption); !ok {
			return status.Errorf(codes.Unimplemented, "framedrpc: call option %T is not supported (%s)", o, method)
		}
	}
	for attempt := 0; ; attempt++ {
		cc, reused, err := c.get(ctx)
		if err != nil {
			return err
		}
		replied, err := c.call(ctx, cc, method, args, reply)
		c.put(cc, err == nil || isStatus(err))
		if err == nil || isStatus(err) {
			return err
		}
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return status.FromContextError(cmp.Or(ctx.Err(), err)).Err()
		}
		if reused && !replied && attempt == 0 && isClosedByPeer(err) && !c.isClosed() {
			continue
		}
		return status.Errorf(codes.Unavailable, "framedrpc: %s to %s: %v", method, c.addr, err)
	}
}

// call does one exchange on cc. replied reports whether any byte of the
// reply arrived (a reply cut short is a malformed frame). A returned status error is the server's answer; any other
// error leaves the connection unusable.
func (c *Client) call(ctx context.Context, cc *clientConn, method string, args, reply any) (replied bool, err error) {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { cc.dead.Store(true); cc.s.Abort() })
		defer stop()
	}
	cc.s.SetContext(ctx)
	defer cc.s.SetContext(context.Background())
	out := appendHeader(cc.out[:0], kindCall, method)
	if out, err = (proto.MarshalOptions{}).MarshalAppend(out, args.(proto.Message)); err != nil {
		return false, status.Errorf(codes.Internal, "framedrpc: encode %s request: %v", method, err)
	}
	if out, err = finishFrame(out); err != nil {
		return false, status.Error(codes.ResourceExhausted, err.Error())
	}
	if cap(out) <= keepBuffer {
		cc.out = out
	}
	if _, err = cc.w.Write(out); err != nil {
		return false, err
	}
	f, err := cc.fr.next()
	if err != nil {
		return errors.Is(err, errBadFrame), err
	}
	switch f.kind {
	case kindReply:
		if err := proto.Unmarshal(f.body, reply.(proto.Message)); err != nil {
			return true, fmt.Errorf("decode %s reply: %w", method, err)
		}
		return true, nil
	case kindError:
		var st spb.Status
		if err := proto.Unmarshal(f.body, &st); err != nil {
			return true, fmt.Errorf("decode %s error: %w", method, err)
		}
		return true, status.ErrorProto(&st)
	default:
		return true, fmt.Errorf("%w: kind %d from the server", errBadFrame, f.kind)
	}
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// NewStream implements grpc.ClientConnInterface; framed connections carry
// unary calls only.
func (c *Client) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "framedrpc: streaming calls are not supported")
}

// Close closes every connection. Calls in flight fail with
// codes.Unavailable; later calls with codes.Canceled.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	idle := c.idle
	c.idle = nil
	busy := make([]*clientConn, 0, len(c.inUse))
	for cc := range c.inUse {
		busy = append(busy, cc)
	}
	c.mu.Unlock()
	for _, cc := range idle {
		cc.s.Release()
	}
	for _, cc := range busy {
		cc.s.Abort() // its caller releases it on the way out
	}
	return nil
}

// isStatus reports whether err is a status the server sent (the
// connection is still in step).
func isStatus(err error) bool {
	_, ok := status.FromError(err)
	return ok
}

// isClosedByPeer reports an error that means the server had closed the
// connection (an idle one it dropped, or a restarted server).
func isClosedByPeer(err error) bool {
	var ne *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE) ||
		(errors.As(err, &ne) && !ne.Timeout())
}
