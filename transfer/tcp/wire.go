package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/mooncake-go/mooncake/transfer/transport"
)

// TCP wire format (upstream tcp_transport, protocol v2): a request header is
// the C struct {u64 size; u64 addr; u8 opcode} padded to 24 bytes, little
// endian; opcode's high bit marks v2. A v2 server answers every request with
// an 8-byte status frame: magic "MCTV" in the high 32 bits, code in the low.
const (
	// ProtoVersion is the wire protocol version this engine speaks and
	// publishes in its descriptor (upstream v2: every request is answered
	// with a status frame).
	ProtoVersion = 2

	tcpHeaderSize = 24
	tcpV2Flag     = 0x80
	statusMagic   = uint64(0x4D435456) << 32

	statusOK       = 0
	statusRejected = 1
)

// SliceSize is the largest piece of one request that travels as one TCP
// request; bigger requests are split over the peer's lanes.
const SliceSize = 4 << 20

// frameReadBuffer sizes the buffered reader in front of a TCP connection.
// It is small on purpose: headers and status frames are a few bytes, and a
// large buffer would pull the payload behind them into itself, copying it
// twice.
const frameReadBuffer = 512

type tcpHeader struct {
	size   uint64
	addr   uint64
	opcode transport.Opcode
	v2     bool
}

func (h tcpHeader) encode(b *[tcpHeaderSize]byte) {
	*b = [tcpHeaderSize]byte{}
	binary.LittleEndian.PutUint64(b[0:], h.size)
	binary.LittleEndian.PutUint64(b[8:], h.addr)
	b[16] = byte(h.opcode)
	if h.v2 {
		b[16] |= tcpV2Flag
	}
}

func decodeTCPHeader(b []byte) (tcpHeader, error) {
	if len(b) < tcpHeaderSize {
		return tcpHeader{}, fmt.Errorf("tcp header: %d bytes, want %d", len(b), tcpHeaderSize)
	}
	h := tcpHeader{
		size:   binary.LittleEndian.Uint64(b[0:]),
		addr:   binary.LittleEndian.Uint64(b[8:]),
		opcode: transport.Opcode(b[16] &^ tcpV2Flag),
		v2:     b[16]&tcpV2Flag != 0,
	}
	if h.opcode != transport.OpRead && h.opcode != transport.OpWrite {
		return tcpHeader{}, fmt.Errorf("tcp header: unknown opcode %d", b[16])
	}
	return h, nil
}

func encodeStatus(code uint32) [8]byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], statusMagic|uint64(code))
	return b
}

func decodeStatus(b []byte) (uint32, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("tcp status: %d bytes", len(b))
	}
	v := binary.LittleEndian.Uint64(b)
	if v&0xFFFFFFFF00000000 != statusMagic {
		return 0, fmt.Errorf("tcp status: bad magic %#x", v)
	}
	return uint32(v), nil
}
