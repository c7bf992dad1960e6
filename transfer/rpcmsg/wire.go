package rpcmsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/mooncake-go/mooncake/transfer/internal/readn"
)

// headerSize is the kind byte and the u64 payload length before a message.
const headerSize = 9

// errTooLarge is readMessage's answer to a message over the server's bound;
// the server then answers -1 and ends the connection.
var errTooLarge = errors.New("rpcmsg: message larger than the server accepts")

// readMessage reads one message of at most max payload bytes from r. The
// length is checked before anything is allocated, and the payload buffer
// grows with the bytes that arrive (readn), so a header that claims a
// large message costs nothing until the bytes come.
func readMessage(r io.Reader, max uint64) (kind byte, data []byte, err error) {
	var hdr [headerSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint64(hdr[1:])
	if n > max {
		return 0, nil, fmt.Errorf("%w: %d bytes, at most %d", errTooLarge, n, max)
	}
	data, err = readn.Read(r, n)
	if err != nil {
		return 0, nil, err
	}
	return hdr[0], data, nil
}

// encodeMessage is the bytes a client sends for one message.
func encodeMessage(kind byte, data []byte) []byte {
	b := make([]byte, headerSize, headerSize+len(data))
	b[0] = kind
	binary.LittleEndian.PutUint64(b[1:], uint64(len(data)))
	return append(b, data...)
}
