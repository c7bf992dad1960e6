// Package framedrpc carries the unary methods of a gRPC service over plain
// length-prefixed frames on TCP.
//
// A gRPC call between processes passes through several goroutines on each
// side (the HTTP/2 reader, the stream worker, the writer), and every
// hand-off is a wake-up; on a small, loaded host those wake-ups are most of
// the cost of a metadata call. Here a connection carries one call at a
// time: the client writes the request and reads the reply on its own
// goroutine, and the server answers on the goroutine that read the request.
// A client keeps a pool of such connections, one per call in flight.
//
// The service is still defined by its protobuf and grpc.ServiceDesc: a
// Server is a grpc.ServiceRegistrar, a Client a grpc.ClientConnInterface,
// so generated code registers and calls through either transport, and a
// listener can serve both (Server.Split) on one port.
//
// Wire format, all integers little-endian:
//
//	client hello:  "MCFRAME1" | u32 n | n bytes of metadata pairs (u16 len, key, u16 len, value)...
//	server accept: "MCFRAME1"
//	call:          u32 body | u8 1 | u8 0 | u16 m | method name (m bytes) | request (body-m bytes)
//	reply:         u32 body | u8 2 | u8 0 | u16 0 | reply message (body bytes)
//	error:         u32 body | u8 3 | u8 0 | u16 0 | google.rpc.Status (body bytes)
//
// A frame that breaks these rules (unknown kind, body over MaxBody, method
// name longer than the body, truncated) closes the connection; a call to a
// method the server does not have gets an Unimplemented error reply, as
// gRPC answers.
package framedrpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Magic opens a framed connection (client hello) and acknowledges it
// (server accept). Its first bytes differ from HTTP/2's client preface
// ("PRI * HTTP/2.0..."), which is what lets one port serve both.
const Magic = "MCFRAME1"

// MaxBody bounds one frame's body: requests, replies and errors. It matches
// the master's gRPC message limit.
const MaxBody = 64 << 20

// maxHello bounds the hello's metadata block.
const maxHello = 64 << 10

// headerLen is the fixed part of every frame.
const headerLen = 8

// The frame kinds.
const (
	kindCall  = 1
	kindReply = 2
	kindError = 3
)

// errBadFrame marks a frame that breaks the protocol; the connection that
// sent it is closed.
var errBadFrame = errors.New("framedrpc: malformed frame")

// frame is one decoded frame; method and body alias the reader's buffer
// and are valid until the next read.
type frame struct {
	kind   byte
	method []byte
	body   []byte
}

// frameReader decodes frames from a buffered stream into a reused buffer.
type frameReader struct {
	r   *bufio.Reader
	hdr [headerLen]byte
	buf []byte
}

// keepBuffer is the largest body buffer kept between frames; a larger
// body gets its own allocation.
const keepBuffer = 1 << 20

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next reads one frame. io.EOF means the stream ended cleanly between
// frames; errBadFrame (wrapped) means the peer broke the protocol.
func (fr *frameReader) next() (frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return frame{}, fmt.Errorf("%w: truncated header", errBadFrame)
		}
		return frame{}, err
	}
	n := binary.LittleEndian.Uint32(fr.hdr[0:4])
	kind, m := fr.hdr[4], int(binary.LittleEndian.Uint16(fr.hdr[6:8]))
	switch {
	case kind != kindCall && kind != kindReply && kind != kindError:
		return frame{}, fmt.Errorf("%w: unknown kind %d", errBadFrame, kind)
	case n > MaxBody:
		return frame{}, fmt.Errorf("%w: body of %d bytes exceeds %d", errBadFrame, n, MaxBody)
	case m > int(n) || (kind != kindCall && m != 0) || fr.hdr[5] != 0:
		return frame{}, fmt.Errorf("%w: bad header %x", errBadFrame, fr.hdr)
	}
	body, err := fr.readBody(int(n))
	if err != nil {
		return frame{}, fmt.Errorf("%w: truncated body: %v", errBadFrame, err)
	}
	return frame{kind: kind, method: body[:m], body: body[m:]}, nil
}

// readBody reads n bytes into the reused buffer, or for a body larger
// than keepBuffer into one that grows with the bytes that arrive: a
// header alone, from a peer that never sends the body, cannot make the
// reader allocate MaxBody.
func (fr *frameReader) readBody(n int) ([]byte, error) {
	if n <= keepBuffer {
		if n > cap(fr.buf) {
			fr.buf = make([]byte, n)
		}
		body := fr.buf[:n]
		_, err := io.ReadFull(fr.r, body)
		return body, err
	}
	body := make([]byte, 0, keepBuffer)
	for len(body) < n {
		if len(body) == cap(body) {
			body = slices.Grow(body, min(n-len(body), len(body)))
		}
		k := min(cap(body), n)
		if _, err := io.ReadFull(fr.r, body[len(body):k]); err != nil {
			return nil, err
		}
		body = body[:k]
	}
	return body, nil
}

// appendHeader appends a frame header to b; the body length is patched by
// finishFrame once the body has been appended.
func appendHeader(b []byte, kind byte, method string) []byte {
	b = append(b, 0, 0, 0, 0, kind, 0, 0, 0)
	binary.LittleEndian.PutUint16(b[len(b)-2:], uint16(len(method)))
	return append(b, method...)
}

// finishFrame writes the body length of the frame that starts at b[0].
func finishFrame(b []byte) ([]byte, error) {
	n := len(b) - headerLen
	if n > MaxBody {
		return nil, fmt.Errorf("framedrpc: message of %d bytes exceeds %d", n, MaxBody)
	}
	binary.LittleEndian.PutUint32(b[0:4], uint32(n))
	return b, nil
}

// encodeHello is the client's opening bytes: the magic and its metadata.
func encodeHello(md map[string]string) ([]byte, error) {
	b := append([]byte(Magic), 0, 0, 0, 0)
	for k, v := range md {
		if len(k) > 0xffff || len(v) > 0xffff {
			return nil, fmt.Errorf("framedrpc: metadata %q too long", k)
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
		b = append(b, v...)
	}
	n := len(b) - len(Magic) - 4
	if n > maxHello {
		return nil, fmt.Errorf("framedrpc: metadata of %d bytes exceeds %d", n, maxHello)
	}
	binary.LittleEndian.PutUint32(b[len(Magic):], uint32(n))
	return b, nil
}

// readHello reads the metadata block that follows the magic (already
// consumed by the caller).
func readHello(r io.Reader) (map[string]string, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: truncated hello", errBadFrame)
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > maxHello {
		return nil, fmt.Errorf("%w: hello of %d bytes exceeds %d", errBadFrame, n, maxHello)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("%w: truncated hello", errBadFrame)
	}
	md := map[string]string{}
	for len(b) > 0 {
		k, rest, ok := cutField(b)
		if !ok {
			return nil, fmt.Errorf("%w: bad hello metadata", errBadFrame)
		}
		v, rest, ok := cutField(rest)
		if !ok {
			return nil, fmt.Errorf("%w: bad hello metadata", errBadFrame)
		}
		md[string(k)] = string(v)
		b = rest
	}
	return md, nil
}

// cutField splits a u16-length-prefixed field off b.
func cutField(b []byte) (field, rest []byte, ok bool) {
	if len(b) < 2 {
		return nil, nil, false
	}
	n := int(binary.LittleEndian.Uint16(b))
	if len(b) < 2+n {
		return nil, nil, false
	}
	return b[2 : 2+n], b[2+n:], true
}
