package transfer

import (
	"encoding/binary"
	"fmt"
)

// Opcode is a transfer direction, numbered as upstream (Read=0, Write=1).
type Opcode uint8

// Transfer directions.
const (
	OpRead  Opcode = 0
	OpWrite Opcode = 1
)

func (o Opcode) String() string {
	switch o {
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	}
	return fmt.Sprintf("opcode(%d)", uint8(o))
}

// TCP wire format (upstream tcp_transport, protocol v2): a request header is
// the C struct {u64 size; u64 addr; u8 opcode} padded to 24 bytes, little
// endian; opcode's high bit marks v2. A v2 server answers every request with
// an 8-byte status frame: magic "MCTV" in the high 32 bits, code in the low.
const (
	tcpHeaderSize = 24
	tcpV2Flag     = 0x80
	statusMagic   = uint64(0x4D435456) << 32

	statusOK       = 0
	statusRejected = 1
)

// frameReadBuffer sizes the buffered reader in front of a TCP connection.
// It is small on purpose: headers and status frames are a few bytes, and a
// large buffer would pull the payload behind them into itself, copying it
// twice.
const frameReadBuffer = 512

type tcpHeader struct {
	size   uint64
	addr   uint64
	opcode Opcode
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
		opcode: Opcode(b[16] &^ tcpV2Flag),
		v2:     b[16]&tcpV2Flag != 0,
	}
	if h.opcode != OpRead && h.opcode != OpWrite {
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
