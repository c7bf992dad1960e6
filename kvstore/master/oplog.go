package master

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

// entryKind says what an oplog entry replays.
type entryKind byte

const (
	// entryRPC is a Master or DiskTier call: name is the full method
	// ("/mooncake.master.Master/PutStart"), md the tenant and namespace
	// metadata and the client key (client_identity.go), payload the
	// request in protobuf.
	entryRPC entryKind = 1
	// entryEvictTick is one eviction run at the entry's time.
	entryEvictTick entryKind = 2
	// entryClientTick is one client-expiry and release pass.
	entryClientTick entryKind = 3
	// entryPromote marks a new leader taking over: every client's
	// heartbeat restarts at the entry's time.
	entryPromote entryKind = 4
	// entryTenantQuotaSet sets tenant name's quota to the payload's
	// uvarint; entryTenantQuotaDelete drops it (admin API).
	entryTenantQuotaSet    entryKind = 5
	entryTenantQuotaDelete entryKind = 6
	// entryReset empties the state: a leader without the log served
	// since the entry before it (name is its address; oplog_lineage.go).
	entryReset entryKind = 7
	// entryPiece and entryLastPiece carry an entry larger than
	// maxEntryBytes: its encoding cut into consecutive pieces (payload),
	// each with the entry's number and time, the last one of kind
	// entryLastPiece; a replica joins them and applies the entry then.
	entryPiece     entryKind = 8
	entryLastPiece entryKind = 9
)

// entry is one logged state change.
type entry struct {
	kind    entryKind
	n       uint64
	now     time.Time
	name    string
	md      map[string]string
	payload []byte
	// onDurable, on the leader, runs once the entry's batch is in etcd
	// (never when it fails); it is not logged.
	onDurable func()
}

// batch is one oplog key's content.
type batch struct {
	seq     uint64
	entries []entry
}

const (
	batchMagic   = "MCOL"
	batchVersion = 1
	// maxBatchBytes keeps one batch below etcd's default request limit
	// (1.5 MiB) with room for the transaction around it.
	maxBatchBytes = 1 << 20
	// maxEntryBytes is the most one entry takes in a batch, so that a
	// batch's entries never pass maxBatchBytes: a larger batch call is
	// logged as several calls (oplog_split.go), and any other larger
	// entry in pieces (entryPiece).
	maxEntryBytes = maxBatchBytes / 2
	// pieceBytes is how much of a large entry's encoding one piece
	// carries: a piece entry's other fields take at most 64 bytes.
	pieceBytes = maxEntryBytes - 64
)

// OplogPrefix is the etcd key prefix of cluster clusterID's operation
// log: mooncake-store/<cluster_id>/oplog/.
func OplogPrefix(clusterID string) string {
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	return "mooncake-store/" + clusterID + "/oplog/"
}

// oplogKey is the key of batch seq.
func oplogKey(prefix string, seq uint64) string { return fmt.Sprintf("%s%020d", prefix, seq) }

// oplogSeq parses the sequence number out of a batch key.
func oplogSeq(prefix, key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendEntry encodes e onto b.
func appendEntry(b []byte, e *entry) []byte {
	b = append(b, byte(e.kind))
	b = binary.AppendUvarint(b, e.n)
	b = binary.AppendVarint(b, e.now.UnixNano())
	b = appendString(b, e.name)
	b = binary.AppendUvarint(b, uint64(len(e.md)))
	for k, v := range e.md {
		b = appendString(b, k)
		b = appendString(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(e.payload)))
	return append(b, e.payload...)
}

// encodeBatch frames already encoded entries as batch seq.
func encodeBatch(seq uint64, count int, entries []byte) []byte {
	b := make([]byte, 0, len(batchMagic)+1+2*binary.MaxVarintLen64+len(entries))
	b = append(b, batchMagic...)
	b = append(b, batchVersion)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendUvarint(b, uint64(count))
	return append(b, entries...)
}

var errBadBatch = errors.New("oplog: malformed batch")

// decoder reads the fields of an encoded batch.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadBatch
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errBadBatch
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errBadBatch
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = errBadBatch
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// decodeBatch parses a batch written by encodeBatch. It never panics on
// bad input (FuzzDecodeBatch).
func decodeBatch(b []byte) (batch, error) {
	if len(b) < len(batchMagic)+1 || string(b[:len(batchMagic)]) != batchMagic {
		return batch{}, errBadBatch
	}
	if b[len(batchMagic)] != batchVersion {
		return batch{}, fmt.Errorf("oplog: batch version %d, want %d", b[len(batchMagic)], batchVersion)
	}
	d := &decoder{b: b[len(batchMagic)+1:]}
	out := batch{seq: d.uvarint()}
	count := d.uvarint()
	// Every entry takes at least 6 bytes: a count beyond that is a lie.
	if d.err == nil && count > uint64(len(d.b))/6 {
		return batch{}, errBadBatch
	}
	out.entries = make([]entry, 0, count)
	for i := uint64(0); i < count && d.err == nil; i++ {
		out.entries = append(out.entries, d.entry())
	}
	if d.err != nil {
		return batch{}, d.err
	}
	if len(d.b) != 0 {
		return batch{}, errBadBatch
	}
	return out, nil
}

// entry reads one entry written by appendEntry.
func (d *decoder) entry() entry {
	e := entry{kind: entryKind(d.byte()), n: d.uvarint()}
	e.now = time.Unix(0, d.varint())
	e.name = string(d.bytes())
	nmd := d.uvarint()
	if d.err == nil && nmd > uint64(len(d.b))/2 {
		d.err = errBadBatch
	}
	if nmd > 0 && d.err == nil {
		e.md = make(map[string]string, nmd)
		for j := uint64(0); j < nmd && d.err == nil; j++ {
			k := string(d.bytes())
			e.md[k] = string(d.bytes())
		}
	}
	e.payload = d.bytes()
	return e
}

// decodeEntry parses the joined pieces of a large entry: exactly one
// entry, not itself in pieces.
func decodeEntry(b []byte) (entry, error) {
	d := &decoder{b: b}
	e := d.entry()
	if d.err == nil && (len(d.b) != 0 || e.kind == entryPiece || e.kind == entryLastPiece) {
		d.err = errBadBatch
	}
	return e, d.err
}

// pieces cuts the encoding of an entry larger than maxEntryBytes into
// the entries that carry it (entryPiece), each of at most maxEntryBytes.
func pieces(e *entry, enc []byte) []*entry {
	var out []*entry
	for len(enc) > 0 {
		k := min(len(enc), pieceBytes)
		p := &entry{kind: entryPiece, n: e.n, now: e.now, payload: enc[:k:k]}
		enc = enc[k:]
		out = append(out, p)
	}
	out[len(out)-1].kind = entryLastPiece
	return out
}
