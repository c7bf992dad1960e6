package redis

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"testing"
)

// FuzzReadReply feeds arbitrary bytes to the reply parser: it must return
// a reply or an error, never panic or allocate past its limits, and a
// reply it accepts must encode back to bytes it reads as the same reply.
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n", "-ERR unknown command\r\n", ":-42\r\n", "$5\r\nhello\r\n", "$-1\r\n", "*-1\r\n",
		"*3\r\n$1\r\na\r\n:1\r\n*1\r\n$-1\r\n", "*2\r\n:1\r\n:7\r\n", "$0\r\n\r\n",
		"$99999999999\r\n", "*1048577\r\n", "$3\r\nabcXY", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ReadReply(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("error of no known kind: %v", err)
			}
			return
		}
		enc := encodeReply(nil, r)
		r2, err := ReadReply(bufio.NewReader(bytes.NewReader(enc)))
		if err != nil {
			t.Fatalf("re-reading %q: %v", enc, err)
		}
		if enc2 := encodeReply(nil, r2); !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the reply: %q -> %q", enc, enc2)
		}
	})
}

// encodeReply writes r in RESP2 (nil as a null bulk string).
func encodeReply(b []byte, r Reply) []byte {
	switch r.Kind {
	case Status, ErrorReply:
		b = append(append(append(b, byte(r.Kind)), r.Str...), '\r', '\n')
	case Integer:
		b = append(append(b, ':'), strconv.AppendInt(nil, r.Int, 10)...)
		b = append(b, '\r', '\n')
	case Bulk:
		b = append(append(b, '$'), strconv.AppendInt(nil, int64(len(r.Str)), 10)...)
		b = append(append(append(b, '\r', '\n'), r.Str...), '\r', '\n')
	case Array:
		b = append(append(b, '*'), strconv.AppendInt(nil, int64(len(r.Elems)), 10)...)
		b = append(b, '\r', '\n')
		for _, e := range r.Elems {
			b = encodeReply(b, e)
		}
	case Nil:
		b = append(b, "$-1\r\n"...)
	}
	return b
}
