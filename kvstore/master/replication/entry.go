package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file holds the operation log's format and key layout
// (docs/design/oplog.md, "Key layout and format"). The leader turns every call
// that touches the state machine into an entry; entries go to etcd in
// numbered batches, one key per batch:
//
//	mooncake-store/<cluster_id>/oplog/<seq, 20 decimal digits>
//
// A batch's value is
//
//	"MCOL" version(1 byte) uvarint(seq) uvarint(count) entry*
//
// and an entry is
//
//	kind(1 byte) uvarint(number) varint(unix ns) string(name)
//	uvarint(#md) (string(key) string(value))* string(payload)
//
// where string is uvarint(length) and the bytes. number counts entries
// from 0 over the whole log; replay seeds the state's random source with
// it, so that a replica draws the same placements as the leader did.

// Kind says what an oplog entry replays.
type Kind byte

const (
	// KindRPC is a Master or DiskTier call: name is the full method
	// ("/mooncake.master.Master/PutStart"), md the tenant and namespace
	// metadata and the client key (the master's client_identity.go), payload the
	// request in protobuf.
	KindRPC Kind = 1
	// KindEvictTick is one eviction run at the entry's time.
	KindEvictTick Kind = 2
	// KindClientTick is one client-expiry and release pass.
	KindClientTick Kind = 3
	// KindPromote marks a new leader taking over: every client's
	// heartbeat restarts at the entry's time.
	KindPromote Kind = 4
	// KindTenantQuotaSet sets tenant name's quota to the payload's
	// uvarint; KindTenantQuotaDelete drops it (admin API).
	KindTenantQuotaSet    Kind = 5
	KindTenantQuotaDelete Kind = 6
	// KindReset empties the state: a leader without the log served
	// since the entry before it (name is its address; lineage.go).
	KindReset Kind = 7
	// KindPiece and KindLastPiece carry an entry larger than
	// MaxEntryBytes: its encoding cut into consecutive pieces (payload),
	// each with the entry's number and time, the last one of kind
	// KindLastPiece; a replica joins them and applies the entry then.
	KindPiece     Kind = 8
	KindLastPiece Kind = 9
)

// Entry is one logged state change.
type Entry struct {
	// Kind says what the entry replays.
	Kind Kind
	// N numbers the entry from 0 over the whole log.
	N uint64
	// Now is the time the state machine sees while it applies the entry.
	Now time.Time
	// Name, MD and Payload are the kind's fields (see the kinds).
	Name    string
	MD      map[string]string
	Payload []byte
	// OnDurable, on the leader, runs once the entry's batch is in etcd
	// (never when it fails); it is not logged.
	OnDurable func()
}

// batch is one oplog key's content.
type batch struct {
	seq     uint64
	entries []Entry
}

const (
	batchMagic   = "MCOL"
	batchVersion = 1
	// MaxBatchBytes keeps one batch below etcd's default request limit
	// (1.5 MiB) with room for the transaction around it.
	MaxBatchBytes = 1 << 20
	// MaxEntryBytes is the most one entry takes in a batch, so that a
	// batch's entries never pass MaxBatchBytes: a larger batch call is
	// logged as several calls (the master's oplog_split.go), and any other larger
	// entry in pieces (KindPiece).
	MaxEntryBytes = MaxBatchBytes / 2
	// pieceBytes is how much of a large entry's encoding one piece
	// carries: a piece entry's other fields take at most 64 bytes.
	pieceBytes = MaxEntryBytes - 64
)

// OplogPrefix is the etcd key prefix of cluster clusterID's operation
// log: mooncake-store/<cluster_id>/oplog/.
func OplogPrefix(clusterID string) string {
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	return "mooncake-store/" + clusterID + "/oplog/"
}

// BatchKey is the key of batch seq.
func BatchKey(prefix string, seq uint64) string { return fmt.Sprintf("%s%020d", prefix, seq) }

// BatchSeq parses the sequence number out of a batch key.
func BatchSeq(prefix, key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// AppendString appends s as uvarint(length) and its bytes.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendEntry encodes e onto b.
func AppendEntry(b []byte, e *Entry) []byte {
	b = append(b, byte(e.Kind))
	b = binary.AppendUvarint(b, e.N)
	b = binary.AppendVarint(b, e.Now.UnixNano())
	b = AppendString(b, e.Name)
	b = binary.AppendUvarint(b, uint64(len(e.MD)))
	for k, v := range e.MD {
		b = AppendString(b, k)
		b = AppendString(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(e.Payload)))
	return append(b, e.Payload...)
}

// EncodeBatch frames already encoded entries as batch seq.
func EncodeBatch(seq uint64, count int, entries []byte) []byte {
	b := make([]byte, 0, len(batchMagic)+1+2*binary.MaxVarintLen64+len(entries))
	b = append(b, batchMagic...)
	b = append(b, batchVersion)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendUvarint(b, uint64(count))
	return append(b, entries...)
}

var errBadBatch = errors.New("oplog: malformed batch")

// Decoder reads the fields AppendString and the binary package's
// uvarint and varint appenders wrote: a batch's, and those of the
// payloads and snapshots a state machine encodes the same way. A
// failure sets Err (errBadBatch) and makes every later read return zero.
type Decoder struct {
	// B is what is left to read.
	B []byte
	// Err is the first failure.
	Err error
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Err = errBadBatch
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Varint reads a signed varint.
func (d *Decoder) Varint() int64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Err = errBadBatch
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Bytes reads a string AppendString wrote, as a slice of B.
func (d *Decoder) Bytes() []byte {
	n := d.Uvarint()
	if d.Err != nil {
		return nil
	}
	if n > uint64(len(d.B)) {
		d.Err = errBadBatch
		return nil
	}
	v := d.B[:n:n]
	d.B = d.B[n:]
	return v
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.Err != nil {
		return 0
	}
	if len(d.B) == 0 {
		d.Err = errBadBatch
		return 0
	}
	v := d.B[0]
	d.B = d.B[1:]
	return v
}

// decodeBatch parses a batch written by EncodeBatch. It never panics on
// bad input (FuzzDecodeBatch).
func decodeBatch(b []byte) (batch, error) {
	if len(b) < len(batchMagic)+1 || string(b[:len(batchMagic)]) != batchMagic {
		return batch{}, errBadBatch
	}
	if b[len(batchMagic)] != batchVersion {
		return batch{}, fmt.Errorf("oplog: batch version %d, want %d", b[len(batchMagic)], batchVersion)
	}
	d := &Decoder{B: b[len(batchMagic)+1:]}
	out := batch{seq: d.Uvarint()}
	count := d.Uvarint()
	// Every entry takes at least 6 bytes: a count beyond that is a lie.
	if d.Err == nil && count > uint64(len(d.B))/6 {
		return batch{}, errBadBatch
	}
	out.entries = make([]Entry, 0, count)
	for i := uint64(0); i < count && d.Err == nil; i++ {
		out.entries = append(out.entries, d.entry())
	}
	if d.Err != nil {
		return batch{}, d.Err
	}
	if len(d.B) != 0 {
		return batch{}, errBadBatch
	}
	return out, nil
}

// entry reads one entry written by AppendEntry.
func (d *Decoder) entry() Entry {
	e := Entry{Kind: Kind(d.Byte()), N: d.Uvarint()}
	e.Now = time.Unix(0, d.Varint())
	e.Name = string(d.Bytes())
	nmd := d.Uvarint()
	if d.Err == nil && nmd > uint64(len(d.B))/2 {
		d.Err = errBadBatch
	}
	if nmd > 0 && d.Err == nil {
		e.MD = make(map[string]string, nmd)
		for j := uint64(0); j < nmd && d.Err == nil; j++ {
			k := string(d.Bytes())
			e.MD[k] = string(d.Bytes())
		}
	}
	e.Payload = d.Bytes()
	return e
}

// decodeEntry parses the joined pieces of a large entry: exactly one
// entry, not itself in pieces.
func decodeEntry(b []byte) (Entry, error) {
	d := &Decoder{B: b}
	e := d.entry()
	if d.Err == nil && (len(d.B) != 0 || e.Kind == KindPiece || e.Kind == KindLastPiece) {
		d.Err = errBadBatch
	}
	return e, d.Err
}

// PayloadRoom is how many payload bytes an entry named name with
// metadata md carries within MaxEntryBytes: a call whose request is
// larger is logged as several calls where it can be cut (the master's
// oplog_split.go), else in pieces.
func PayloadRoom(name string, md map[string]string) int {
	return MaxEntryBytes - entryOverhead(name, md)
}

// entryOverhead is how many bytes an entry named method with metadata md
// takes in a batch besides its payload's (AppendEntry's layout, each
// number at its longest).
func entryOverhead(method string, md map[string]string) int {
	n := 1 + 4*binary.MaxVarintLen64 + stringSize(method)
	for k, v := range md {
		n += stringSize(k) + stringSize(v)
	}
	return n
}

func stringSize(s string) int { return len(binary.AppendUvarint(nil, uint64(len(s)))) + len(s) }

// pieces cuts the encoding of an entry larger than MaxEntryBytes into
// the entries that carry it (KindPiece), each of at most MaxEntryBytes.
func pieces(e *Entry, enc []byte) []*Entry {
	var out []*Entry
	for len(enc) > 0 {
		k := min(len(enc), pieceBytes)
		p := &Entry{Kind: KindPiece, N: e.N, Now: e.Now, Payload: enc[:k:k]}
		enc = enc[k:]
		out = append(out, p)
	}
	out[len(out)-1].Kind = KindLastPiece
	return out
}
