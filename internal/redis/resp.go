package redis

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Limits on what ReadReply accepts from a server. A reply beyond them is
// refused with ErrProtocol instead of allocating what a broken or hostile
// server announces.
const (
	// MaxBulkLen is the longest bulk string (a value) read, in bytes.
	MaxBulkLen = 64 << 20
	// MaxArrayLen is the most elements one array reply may announce.
	MaxArrayLen = 1 << 20
	// MaxDepth is how deeply arrays may nest.
	MaxDepth = 8
	// maxLineLen bounds a simple string, error or number line.
	maxLineLen = 64 << 10
)

// ErrProtocol marks a reply that is not valid RESP2 or exceeds the limits.
var ErrProtocol = errors.New("redis: protocol error")

// Kind is the type of a reply.
type Kind byte

// Reply kinds (RESP2).
const (
	// Status is a simple string ("+OK").
	Status Kind = '+'
	// ErrorReply is an error line ("-ERR ..."); Do returns it as *Error.
	ErrorReply Kind = '-'
	// Integer is a signed 64-bit number (":1").
	Integer Kind = ':'
	// Bulk is a binary-safe string ("$3\r\nabc").
	Bulk Kind = '$'
	// Array is a list of replies ("*2\r\n...").
	Array Kind = '*'
	// Nil is a null bulk string or null array ("$-1", "*-1").
	Nil Kind = 0
)

// Reply is one RESP2 reply.
type Reply struct {
	Kind  Kind
	Str   []byte  // Status, ErrorReply and Bulk
	Int   int64   // Integer
	Elems []Reply // Array
}

// Error is an error reply from the server ("ERR unknown command",
// "WRONGPASS ...", "NOSCRIPT ...").
type Error struct{ Msg string }

func (e *Error) Error() string { return "redis: " + e.Msg }

// ReadReply reads one reply from r.
func ReadReply(r *bufio.Reader) (Reply, error) { return readReply(r, 0) }

func readReply(r *bufio.Reader, depth int) (Reply, error) {
	line, err := readLine(r)
	if err != nil {
		return Reply{}, err
	}
	if len(line) == 0 {
		return Reply{}, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	kind, rest := Kind(line[0]), line[1:]
	switch kind {
	case Status, ErrorReply:
		return Reply{Kind: kind, Str: rest}, nil
	case Integer:
		n, err := parseInt(rest)
		if err != nil {
			return Reply{}, err
		}
		return Reply{Kind: Integer, Int: n}, nil
	case Bulk:
		n, err := parseLen(rest, MaxBulkLen)
		if err != nil || n < 0 {
			return Reply{Kind: Nil}, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return Reply{}, unexpectedEOF(err)
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return Reply{}, fmt.Errorf("%w: bulk string not ended by CRLF", ErrProtocol)
		}
		return Reply{Kind: Bulk, Str: buf[:n]}, nil
	case Array:
		n, err := parseLen(rest, MaxArrayLen)
		if err != nil || n < 0 {
			return Reply{Kind: Nil}, err
		}
		if depth >= MaxDepth {
			return Reply{}, fmt.Errorf("%w: arrays nested deeper than %d", ErrProtocol, MaxDepth)
		}
		// Grow as elements arrive: an announced length costs nothing
		// until its elements are really there.
		elems := make([]Reply, 0, min(n, 64))
		for range n {
			e, err := readReply(r, depth+1)
			if err != nil {
				return Reply{}, err
			}
			elems = append(elems, e)
		}
		return Reply{Kind: Array, Elems: elems}, nil
	default:
		return Reply{}, fmt.Errorf("%w: unknown reply type %q", ErrProtocol, line[0])
	}
}

// readLine reads up to CRLF and returns the line without it.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLineLen {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, maxLineLen)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, unexpectedEOF(err)
		}
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not ended by CRLF", ErrProtocol)
	}
	return line[:len(line)-2], nil
}

// unexpectedEOF turns an EOF inside a reply into io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func parseInt(b []byte) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: bad number %q", ErrProtocol, b)
	}
	return n, nil
}

// parseLen parses a bulk or array length: -1 (nil) or 0..limit.
func parseLen(b []byte, limit int64) (int, error) {
	n, err := parseInt(b)
	if err != nil {
		return 0, err
	}
	if n < -1 || n > limit {
		return 0, fmt.Errorf("%w: length %d out of range [-1, %d]", ErrProtocol, n, limit)
	}
	return int(n), nil
}

// appendCommand appends args as a RESP2 array of bulk strings, the form
// every command is sent in.
func appendCommand(b []byte, args []string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}
