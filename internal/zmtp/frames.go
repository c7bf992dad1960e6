// Package zmtp speaks the server side of ZMTP 3.0 (the ZeroMQ wire
// protocol, RFC 23/ZMTP with the NULL mechanism) for two socket types:
// PUB (RFC 29: fan a message out to every subscriber whose subscription
// prefixes its first frame) and ROUTER (RFC 28: deliver each peer's
// messages tagged with the peer's identity, and route replies back by
// identity). It is what mooncake_master's KV cache event publisher binds;
// libzmq (pyzmq, cppzmq) SUB, REQ and DEALER sockets connect to it.
//
// It is deliberately small: bind only (no connect), TCP and IPC
// transports, no CURVE/PLAIN security, no ZMTP 3.1 heartbeats (PING is
// ignored). Every peer gets its own bounded outgoing queue, so a stalled
// subscriber loses its own messages and never delays the others or the
// sender. Frames from peers are bounded in size and count; a peer that
// breaks the protocol is disconnected.
package zmtp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame flag bits (RFC 23).
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

// greetingLen is the size of a ZMTP 3 greeting.
const greetingLen = 64

// ErrProtocol is wrapped by every error about bytes a peer sent.
var ErrProtocol = errors.New("zmtp: protocol error")

func protoErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, a...))
}

// greeting returns this side's greeting: ZMTP 3.0, NULL mechanism, as
// server.
func greeting() []byte {
	g := make([]byte, greetingLen)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0
	copy(g[12:32], "NULL")
	g[32] = 1
	return g
}

// checkGreeting validates a peer's greeting: a ZMTP 3.x signature and the
// NULL mechanism.
func checkGreeting(g []byte) error {
	if len(g) != greetingLen || g[0] != 0xff || g[9] != 0x7f {
		return protoErr("not a ZMTP greeting")
	}
	if g[10] < 3 {
		return protoErr("peer speaks ZMTP %d.%d; want 3.x", g[10], g[11])
	}
	mech := g[12:32]
	if string(mech[:4]) != "NULL" || mech[4] != 0 {
		return protoErr("peer asks for security mechanism %q; only NULL is supported", trimZeros(mech))
	}
	return nil
}

func trimZeros(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Limits bounds what a peer may send.
type Limits struct {
	// MaxFrame is the largest frame body accepted, in bytes.
	MaxFrame int
	// MaxFrames is the most frames one message may have.
	MaxFrames int
}

// frame is one frame read from a peer.
type frame struct {
	command bool
	more    bool
	body    []byte
}

// readFrame reads one frame of at most maxSize bytes.
func readFrame(r *bufio.Reader, maxSize int) (frame, error) {
	flags, err := r.ReadByte()
	if err != nil {
		return frame{}, err
	}
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return frame{}, protoErr("frame flags %#x have reserved bits set", flags)
	}
	var size uint64
	if flags&flagLong != 0 {
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return frame{}, err
		}
		size = binary.BigEndian.Uint64(b[:])
	} else {
		b, err := r.ReadByte()
		if err != nil {
			return frame{}, err
		}
		size = uint64(b)
	}
	if size > uint64(maxSize) {
		return frame{}, protoErr("frame of %d bytes exceeds the limit of %d", size, maxSize)
	}
	f := frame{command: flags&flagCommand != 0, more: flags&flagMore != 0, body: make([]byte, size)}
	if f.command && f.more {
		return frame{}, protoErr("command frame with the MORE flag")
	}
	if _, err := io.ReadFull(r, f.body); err != nil {
		return frame{}, err
	}
	return f, nil
}

// readMessage reads the next message from r: its frames, or, for a
// command, the command's name and data (msg is nil then).
func readMessage(r *bufio.Reader, lim Limits) (msg [][]byte, cmd *command, err error) {
	for {
		f, err := readFrame(r, lim.MaxFrame)
		if err != nil {
			return nil, nil, err
		}
		if f.command {
			if len(msg) > 0 {
				return nil, nil, protoErr("command inside a multipart message")
			}
			c, err := parseCommand(f.body)
			if err != nil {
				return nil, nil, err
			}
			return nil, &c, nil
		}
		if len(msg) == lim.MaxFrames {
			return nil, nil, protoErr("message of more than %d frames", lim.MaxFrames)
		}
		msg = append(msg, f.body)
		if !f.more {
			return msg, nil, nil
		}
	}
}

// appendFrame appends one frame with the given flags (flagMore,
// flagCommand) to b, choosing the short or long size form.
func appendFrame(b []byte, flags byte, body []byte) []byte {
	if len(body) > 255 {
		b = append(b, flags|flagLong)
		b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	} else {
		b = append(b, flags, byte(len(body)))
	}
	return append(b, body...)
}

// EncodeMessage returns frames as one ZMTP message on the wire.
func EncodeMessage(frames [][]byte) []byte {
	n := 0
	for _, f := range frames {
		n += len(f) + 9
	}
	b := make([]byte, 0, n)
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		b = appendFrame(b, flags, f)
	}
	return b
}

// command is a parsed ZMTP command.
type command struct {
	name string
	data []byte
}

func parseCommand(body []byte) (command, error) {
	if len(body) < 1 || int(body[0]) > len(body)-1 {
		return command{}, protoErr("truncated command name")
	}
	n := int(body[0])
	return command{name: string(body[1 : 1+n]), data: body[1+n:]}, nil
}

// encodeCommand returns a command frame.
func encodeCommand(name string, data []byte) []byte {
	body := make([]byte, 0, 1+len(name)+len(data))
	body = append(body, byte(len(name)))
	body = append(body, name...)
	body = append(body, data...)
	return appendFrame(nil, flagCommand, body)
}

// readyCommand is this side's READY with the given properties.
func readyCommand(props map[string]string, order ...string) []byte {
	var data []byte
	for _, k := range order {
		v := props[k]
		data = append(data, byte(len(k)))
		data = append(data, k...)
		data = binary.BigEndian.AppendUint32(data, uint32(len(v)))
		data = append(data, v...)
	}
	return encodeCommand("READY", data)
}

// parseProperties parses a READY command's metadata.
func parseProperties(data []byte) (map[string]string, error) {
	props := map[string]string{}
	for len(data) > 0 {
		n := int(data[0])
		if len(data) < 1+n+4 {
			return nil, protoErr("truncated READY property")
		}
		name := string(data[1 : 1+n])
		data = data[1+n:]
		vl := binary.BigEndian.Uint32(data)
		data = data[4:]
		if uint64(vl) > uint64(len(data)) {
			return nil, protoErr("READY property %q overruns the command", name)
		}
		props[name] = string(data[:vl])
		data = data[vl:]
	}
	return props, nil
}
