package kvevents

import (
	"strconv"
	"strings"
)

// Kind is what happened to an object's availability.
type Kind uint8

// The three event types of the contract.
const (
	// Stored: the object became readable from the medium.
	Stored Kind = iota + 1
	// Removed: the object is no longer readable from the medium.
	Removed
	// Cleared: every object of the tenant is gone (remove_all).
	Cleared
)

// Medium is the tier an object is readable from.
type Medium uint8

// The master's two tiers: memory replicas are "cpu"; LOCAL_DISK (client
// SSD offload) and DISK (--root_fs_dir) replicas are "disk".
const (
	MediumCPU Medium = iota + 1
	MediumDisk
)

func (m Medium) String() string {
	switch m {
	case MediumCPU:
		return "cpu"
	case MediumDisk:
		return "disk"
	}
	return ""
}

// Event is one availability change as the master's state machine reports
// it (under its mutex: building one allocates nothing beyond the struct).
type Event struct {
	Kind   Kind
	Medium Medium // zero for Cleared
	Tenant string
	Key    string // the caller's key, without the tenant; "" for Cleared
}

// eventTypes are the contract's event_type values and the legacy (vLLM
// class) names, by Kind.
var (
	eventTypes  = [...]string{Stored: "stored", Removed: "removed", Cleared: "cleared"}
	legacyTypes = [...]string{Stored: "BlockStored", Removed: "BlockRemoved", Cleared: "AllBlocksCleared"}
)

// SeqHash parses the rolling sequence hash a key carries: the whole key
// as a decimal u64, or 0x/0X and hexadecimal u64. Other keys carry none.
func SeqHash(key string) (uint64, bool) {
	if rest, ok := strings.CutPrefix(key, "0x"); ok {
		return parseHash(rest, 16)
	}
	if rest, ok := strings.CutPrefix(key, "0X"); ok {
		return parseHash(rest, 16)
	}
	return parseHash(key, 10)
}

func parseHash(s string, base int) (uint64, bool) {
	if s == "" || s[0] == '+' || s[0] == '-' || strings.Contains(s, "_") {
		return 0, false
	}
	v, err := strconv.ParseUint(s, base, 64)
	return v, err == nil
}

// Fields are the stream-identity values written into every event.
type Fields struct {
	BackendID      string
	ModelName      string // "" is written as nil
	AdditionalSalt string // "" is written as nil
	LoraName       string // "" is written as nil
	BlockSize      uint32 // 0 is written as nil (an int 0 in the legacy block_size)
	DPRank         uint32
	// EmitLegacyCompat adds the legacy fields (type, block_hashes,
	// parent_block_hash, token_ids, lora_id) so vLLM's msgspec classes
	// (tagged maps) decode each event.
	EmitLegacyCompat bool
	// EmitObjectKey adds object_key. Without it an object event whose key
	// carries no sequence hash has no identity and is skipped.
	EmitObjectKey bool
}

// mapWriter appends key/value pairs and counts them.
type mapWriter struct {
	b []byte
	n int
}

func (m *mapWriter) key(k string) *mapWriter {
	m.b = appendString(m.b, k)
	m.n++
	return m
}

func (m *mapWriter) str(k, v string) { m.key(k).b = appendString(m.b, v) }
func (m *mapWriter) strOrNil(k, v string) {
	m.key(k).b = appendStringOrNil(m.b, v)
}
func (m *mapWriter) uint(k string, v uint64) { m.key(k).b = appendUint(m.b, v) }
func (m *mapWriter) int(k string, v int64)   { m.key(k).b = appendInt(m.b, v) }
func (m *mapWriter) null(k string)           { m.key(k).b = appendNil(m.b) }
func (m *mapWriter) hashes(k string, h []uint64) {
	m.key(k).b = appendArrayHeader(m.b, len(h))
	for _, v := range h {
		m.b = appendUint(m.b, v)
	}
}

// encodable reports whether ev can be published under f: an object event
// needs a sequence hash or the object key.
func (f *Fields) encodable(ev Event) bool {
	if ev.Kind == Cleared || f.EmitObjectKey {
		return true
	}
	_, ok := SeqHash(ev.Key)
	return ok
}

// appendEvent appends ev as one event map (the contract's field names,
// plus the legacy and object-key fields f asks for).
func (f *Fields) appendEvent(b []byte, ev Event, id uint64, tsMillis int64, scratch *mapWriter) []byte {
	m := scratch
	m.b, m.n = m.b[:0], 0
	m.uint("event_id", id)
	m.int("timestamp", tsMillis)
	m.str("event_type", eventTypes[ev.Kind])
	m.strOrNil("model_name", f.ModelName)
	switch {
	case f.EmitLegacyCompat && ev.Kind == Stored:
		m.uint("block_size", uint64(f.BlockSize)) // vLLM's BlockStored.block_size is an int
	case f.BlockSize == 0:
		m.null("block_size")
	default:
		m.uint("block_size", uint64(f.BlockSize))
	}
	m.strOrNil("additional_salt", f.AdditionalSalt)
	m.strOrNil("lora_name", f.LoraName)
	m.str("tenant_id", ev.Tenant)
	m.str("backend_id", f.BackendID)
	m.strOrNil("medium", ev.Medium.String())
	m.uint("dp_rank", uint64(f.DPRank))
	if f.EmitLegacyCompat {
		m.str("type", legacyTypes[ev.Kind])
	}
	if ev.Kind != Cleared {
		var hs []uint64
		if h, ok := SeqHash(ev.Key); ok {
			hs = []uint64{h}
		}
		m.hashes("seq_hashes", hs)
		m.null("base_block_idx")
		if f.EmitObjectKey {
			m.str("object_key", ev.Key)
		}
		if f.EmitLegacyCompat {
			m.hashes("block_hashes", hs)
		}
	}
	if ev.Kind == Stored {
		m.null("parent_hash")
		if f.EmitLegacyCompat {
			m.null("parent_block_hash")
			m.key("token_ids").b = appendArrayHeader(m.b, 0) // vLLM wants a list
			m.null("lora_id")
		} else {
			m.null("token_ids")
		}
	}
	b = appendMapHeader(b, m.n)
	return append(b, m.b...)
}

// encodeBatch encodes the payload [timestamp_ms, [event maps], dp_rank]
// of evs (all encodable) with event ids from firstID on.
func (f *Fields) encodeBatch(evs []Event, firstID uint64, tsMillis int64, scratch *mapWriter) []byte {
	b := make([]byte, 0, 64+len(evs)*320)
	b = appendArrayHeader(b, 3)
	b = appendInt(b, tsMillis)
	b = appendArrayHeader(b, len(evs))
	for i, ev := range evs {
		b = f.appendEvent(b, ev, firstID+uint64(i), tsMillis, scratch)
	}
	return appendUint(b, uint64(f.DPRank))
}
