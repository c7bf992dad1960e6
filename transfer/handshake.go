package transfer

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Handshake frame types (upstream include/common.h).
const (
	frameConnection byte = 0
	frameMetadata   byte = 1
	frameNotify     byte = 2
	frameProbe      byte = 3
)

// writeFrame sends one handshake frame: a little-endian u64 length
// (payload+1), the type byte, then the JSON payload.
func writeFrame(w io.Writer, typ byte, payload []byte) error {
	buf := make([]byte, 9+len(payload))
	binary.LittleEndian.PutUint64(buf, uint64(len(payload))+1)
	buf[8] = typ
	copy(buf[9:], payload)
	_, err := w.Write(buf)
	return err
}

// readFrame reads one handshake frame of at most max bytes. A legacy frame
// (no type byte, payload starting with '{') is reported as a Connection
// frame, as upstream does.
func readFrame(r io.Reader, max uint64) (typ byte, payload []byte, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint64(hdr[:])
	if n == 0 || n > max {
		return 0, nil, errorf(CodeMalformedJSON, nil, "handshake frame length %d outside 1..%d", n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	if body[0] == '{' {
		return frameConnection, body, nil
	}
	if body[0] > frameProbe {
		return 0, nil, errorf(CodeMalformedJSON, nil, "unknown handshake frame type %d", body[0])
	}
	return body[0], body[1:], nil
}

// Notify is a short message delivered to a named segment.
type Notify struct {
	Name string `json:"name"`
	Msg  string `json:"notify_msg"`
}

// handshakeCall sends one frame to addr and returns the reply's payload.
func handshakeCall(addr string, typ byte, payload []byte, timeout time.Duration, max uint64) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, errorf(CodeSocket, err, "handshake with %s", addr)
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	if err := writeFrame(conn, typ, payload); err != nil {
		return nil, errorf(CodeSocket, err, "handshake with %s", addr)
	}
	rt, reply, err := readFrame(conn, max)
	if err != nil {
		var te *Error
		if errors.As(err, &te) {
			return nil, err
		}
		return nil, errorf(CodeSocket, err, "handshake reply from %s", addr)
	}
	if rt != typ {
		return nil, errorf(CodeRejectHandshake, nil, "%s answered frame type %d to %d", addr, rt, typ)
	}
	return reply, nil
}

// handshakeServer answers peers' handshake frames on the RPC port.
type handshakeServer struct {
	ln       net.Listener
	max      uint64
	metadata func() ([]byte, error) // the local segment descriptor
	notify   func(Notify)           // queue a received notification
	conns    connSet                // accepted connections, cut by Engine.Close
}

func (s *handshakeServer) serve() { serveAccepted(s.ln, &s.conns, s.serveConn) }

func (s *handshakeServer) serveConn(conn net.Conn) {
	for {
		conn.SetReadDeadline(time.Now().Add(time.Minute))
		typ, payload, err := readFrame(conn, s.max)
		if err != nil {
			return
		}
		reply, err := s.answer(typ, payload)
		if err != nil {
			return
		}
		conn.SetWriteDeadline(time.Now().Add(defaultHandshakeTimeout))
		if writeFrame(conn, typ, reply) != nil {
			return
		}
	}
}

func (s *handshakeServer) answer(typ byte, payload []byte) ([]byte, error) {
	switch typ {
	case frameMetadata:
		return s.metadata()
	case frameNotify:
		var n Notify
		if err := json.Unmarshal(payload, &n); err != nil {
			return nil, err
		}
		s.notify(n)
		return json.Marshal(Notify{Msg: "success"})
	case frameProbe:
		return []byte(`{"status":"success"}`), nil
	default:
		// Connection frames set up RDMA endpoints, which this engine
		// does not have.
		return json.Marshal(map[string]string{"reply_msg": fmt.Sprintf("frame type %d not supported (tcp engine)", typ)})
	}
}
