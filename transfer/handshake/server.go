package handshake

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/mooncake-go/mooncake/transfer/internal/conns"
)

// idleTimeout is how long a server waits for the next frame on a
// connection, and writeTimeout bounds writing a reply.
const (
	idleTimeout  = time.Minute
	writeTimeout = 5 * time.Second
)

// Server answers peers' frames on a segment's RPC port; its Close closes
// the listener and every accepted connection.
type Server struct {
	*conns.Listener
	max      uint64
	metadata func() ([]byte, error) // the local segment descriptor
	notify   func(Notify)           // queue a received notification
}

// NewServer returns a server for ln that accepts frames of at most max
// bytes, answers descriptor requests with metadata() and hands received
// notifications to notify. Serve starts it.
func NewServer(ln net.Listener, max uint64, metadata func() ([]byte, error), notify func(Notify)) *Server {
	return &Server{Listener: conns.NewListener(ln), max: max, metadata: metadata, notify: notify}
}

// Serve accepts and serves connections until Close.
func (s *Server) Serve() { s.Listener.Serve(s.serveConn) }

func (s *Server) serveConn(conn net.Conn) {
	for {
		conn.SetReadDeadline(time.Now().Add(idleTimeout))
		typ, payload, err := ReadFrame(conn, s.max)
		if err != nil {
			return
		}
		reply, err := s.answer(typ, payload)
		if err != nil {
			return
		}
		conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		if WriteFrame(conn, typ, reply) != nil {
			return
		}
	}
}

func (s *Server) answer(typ byte, payload []byte) ([]byte, error) {
	switch typ {
	case FrameMetadata:
		return s.metadata()
	case FrameNotify:
		var n Notify
		if err := json.Unmarshal(payload, &n); err != nil {
			return nil, err
		}
		s.notify(n)
		return json.Marshal(Notify{Msg: "success"})
	case FrameProbe:
		return []byte(`{"status":"success"}`), nil
	default:
		// Connection frames set up RDMA endpoints, which this engine
		// does not have.
		return json.Marshal(map[string]string{"reply_msg": fmt.Sprintf("frame type %d not supported (tcp engine)", typ)})
	}
}
