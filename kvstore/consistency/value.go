package consistency

import (
	"encoding/binary"
	"fmt"
	"hash/crc64"
)

// ValueID names one write: the writer (a worker, from 1) and the writer's
// sequence number (from 1). The zero ValueID is "no value": the key is
// absent.
type ValueID struct {
	Writer uint32 `json:"w"`
	Seq    uint32 `json:"s"`
}

// IsZero reports whether id is the absent value.
func (id ValueID) IsZero() bool { return id == ValueID{} }

func (id ValueID) String() string {
	if id.IsZero() {
		return "absent"
	}
	return fmt.Sprintf("w%d#%d", id.Writer, id.Seq)
}

// Layout of a value: header, body, checksum.
//
//	magic "MCCV" | key length u16 | key | writer u32 | seq u32 | size u64 | body ... | crc64 of all before
//
// The body is a pseudo-random stream seeded by (key, writer, seq), so two
// values of the same size differ almost everywhere and a mix of them fails
// the checksum.
const (
	valueMagic = "MCCV"
	sumSize    = 8
)

var crcTable = crc64.MakeTable(crc64.ECMA)

// headerSize is the size of a value's header for key.
func headerSize(key string) int { return len(valueMagic) + 2 + len(key) + 4 + 4 + 8 }

// MinValueSize is the smallest value Encode can write for key.
func MinValueSize(key string) int { return headerSize(key) + sumSize }

// Encode fills dst (all of it: its length is the value's size, at least
// MinValueSize(key)) with the value that write id of key stores.
func Encode(dst []byte, key string, id ValueID) {
	if len(dst) < MinValueSize(key) {
		panic(fmt.Sprintf("consistency: value of %d bytes is under the %d-byte minimum for key %q", len(dst), MinValueSize(key), key))
	}
	n := copy(dst, valueMagic)
	binary.LittleEndian.PutUint16(dst[n:], uint16(len(key)))
	n += 2
	n += copy(dst[n:], key)
	binary.LittleEndian.PutUint32(dst[n:], id.Writer)
	binary.LittleEndian.PutUint32(dst[n+4:], id.Seq)
	binary.LittleEndian.PutUint64(dst[n+8:], uint64(len(dst)))
	n += 16
	body := dst[n : len(dst)-sumSize]
	fillBody(body, key, id)
	binary.LittleEndian.PutUint64(dst[len(dst)-sumSize:], crc64.Checksum(dst[:len(dst)-sumSize], crcTable))
}

// fillBody writes the pseudo-random stream of (key, id) (splitmix64).
func fillBody(b []byte, key string, id ValueID) {
	s := crc64.Checksum([]byte(key), crcTable) ^ uint64(id.Writer)<<32 ^ uint64(id.Seq)
	var w [8]byte
	for i := 0; i < len(b); i += 8 {
		s += 0x9e3779b97f4a7c15
		z := s
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		binary.LittleEndian.PutUint64(w[:], z)
		copy(b[i:], w[:])
	}
}

// Decode returns the write that b is the value of, read from key. An error
// means b is no write of key: a torn read (bytes of several writes, or of
// none), or another key's value; it says what is wrong.
func Decode(b []byte, key string) (ValueID, error) {
	if len(b) < MinValueSize(key) {
		return ValueID{}, fmt.Errorf("%d bytes, under the %d-byte minimum", len(b), MinValueSize(key))
	}
	n := len(valueMagic)
	if string(b[:n]) != valueMagic {
		return ValueID{}, fmt.Errorf("bad magic %q", b[:n])
	}
	kl := int(binary.LittleEndian.Uint16(b[n:]))
	n += 2
	if kl != len(key) || string(b[n:n+kl]) != key {
		return ValueID{}, fmt.Errorf("header names key %q", b[n:min(n+kl, len(b))])
	}
	n += kl
	id := ValueID{Writer: binary.LittleEndian.Uint32(b[n:]), Seq: binary.LittleEndian.Uint32(b[n+4:])}
	if size := binary.LittleEndian.Uint64(b[n+8:]); size != uint64(len(b)) {
		return id, fmt.Errorf("header of %v says %d bytes, read %d", id, size, len(b))
	}
	want := binary.LittleEndian.Uint64(b[len(b)-sumSize:])
	if got := crc64.Checksum(b[:len(b)-sumSize], crcTable); got != want {
		return id, fmt.Errorf("checksum mismatch for %v (%d bytes): first wrong byte at %d", id, len(b), firstWrong(b, key, id))
	}
	return id, nil
}

// firstWrong is the offset of the first byte of b that differs from the
// value of (key, id) of b's size, or -1 (only the checksum differs).
func firstWrong(b []byte, key string, id ValueID) int {
	want := make([]byte, len(b))
	Encode(want, key, id)
	for i := range b {
		if b[i] != want[i] {
			return i
		}
	}
	return -1
}
