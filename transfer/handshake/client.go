package handshake

import (
	"errors"
	"net"
	"time"

	"github.com/mooncake-go/mooncake/transfer/errcode"
)

// Notify is a short message delivered to a named segment.
type Notify struct {
	Name string `json:"name"`
	Msg  string `json:"notify_msg"`
}

// Call sends one frame to addr and returns the reply's payload. The whole
// exchange is bounded by timeout; a reply over max bytes is refused.
func Call(addr string, typ byte, payload []byte, timeout time.Duration, max uint64) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, errcode.Errorf(errcode.Socket, err, "handshake with %s", addr)
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	if err := WriteFrame(conn, typ, payload); err != nil {
		return nil, errcode.Errorf(errcode.Socket, err, "handshake with %s", addr)
	}
	rt, reply, err := ReadFrame(conn, max)
	if err != nil {
		var te *errcode.Error
		if errors.As(err, &te) {
			return nil, err
		}
		return nil, errcode.Errorf(errcode.Socket, err, "handshake reply from %s", addr)
	}
	if rt != typ {
		return nil, errcode.Errorf(errcode.RejectHandshake, nil, "%s answered frame type %d to %d", addr, rt, typ)
	}
	return reply, nil
}
