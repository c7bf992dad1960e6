package framedrpc

import (
	"net"
	"time"

	"github.com/mooncake-go/mooncake/internal/pollread"
)

// socketConn presents a client's raw socket as the net.Conn that
// crypto/tls runs over. Reads and writes keep the socket's own rules (the
// owner's context, Abort); Close aborts, which is how tls ends a handshake
// whose context ended, and the owner still releases the socket. Deadlines
// are the owner's context's, so the net.Conn ones are not used.
type socketConn struct{ s *pollread.Conn }

func (c socketConn) Read(p []byte) (int, error)       { return c.s.Read(p) }
func (c socketConn) Write(p []byte) (int, error)      { return c.s.Write(p) }
func (c socketConn) Close() error                     { c.s.Abort(); return nil }
func (c socketConn) LocalAddr() net.Addr              { return nil }
func (c socketConn) RemoteAddr() net.Addr             { return nil }
func (c socketConn) SetDeadline(time.Time) error      { return nil }
func (c socketConn) SetReadDeadline(time.Time) error  { return nil }
func (c socketConn) SetWriteDeadline(time.Time) error { return nil }
