package standalone

import (
	"encoding/json"
	"fmt"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// Operations a dummy asks of the daemon.
const (
	opHello       = "hello"        // scope, keyspace: the first call of a connection
	opRegister    = "register"     // base, size, offset + the memfd: install a region
	opUnregister  = "unregister"   // base: withdraw a region
	opPut         = "put"          // keys, parts, config, upsert
	opGet         = "get"          // keys, parts (capacity), fit
	opRanges      = "ranges"       // ranges
	opExist       = "exist"        // keys
	opSize        = "size"         // keys[0]
	opRemove      = "remove"       // keys, force
	opRemoveRegex = "remove_regex" // pattern, force
	opRemoveAll   = "remove_all"   // force
	opHealth      = "health"       // the daemon's health_check
	opHotCache    = "hot_cache"    // the scope's cache memfd, when shared
	opStats       = "stats"        // the scope's cache counters
)

// span is memory in the dummy's address space.
type span struct {
	Addr uint64 `json:"a"`
	Size uint64 `json:"s"`
}

// rangeReq is one ranged read (get_into_ranges).
type rangeReq struct {
	Key       string `json:"k"`
	Dst       uint64 `json:"d"`
	SrcOffset uint64 `json:"o"`
	Size      uint64 `json:"s"`
}

// request is every operation's arguments; each uses the fields its
// constant names.
type request struct {
	Op       string                  `json:"op"`
	Scope    string                  `json:"scope,omitempty"`
	Keyspace string                  `json:"keyspace,omitempty"`
	Base     uint64                  `json:"base,omitempty"`
	Size     uint64                  `json:"size,omitempty"`
	Offset   uint64                  `json:"offset,omitempty"`
	Keys     []string                `json:"keys,omitempty"`
	Parts    [][]span                `json:"parts,omitempty"`
	Config   *client.ReplicateConfig `json:"config,omitempty"`
	Upsert   bool                    `json:"upsert,omitempty"`
	Force    bool                    `json:"force,omitempty"`
	Fit      bool                    `json:"fit,omitempty"`
	Pattern  string                  `json:"pattern,omitempty"`
	Ranges   []rangeReq              `json:"ranges,omitempty"`
}

// response is every operation's result. Code is the call's own result
// (0 or an ErrorCode); per-key results are in Codes (a size or a
// negative ErrorCode).
type response struct {
	Code    int32          `json:"code"`
	Message string         `json:"message,omitempty"`
	Codes   []int64        `json:"codes,omitempty"`
	Needed  []uint64       `json:"needed,omitempty"` // get with fit: sizes that did not fit
	Count   int64          `json:"count,omitempty"`
	Health  int            `json:"health,omitempty"`
	Block   uint64         `json:"block,omitempty"`
	Stats   *scopeCounters `json:"stats,omitempty"`
}

// scopeCounters are a scope's hot cache counters as the daemon counts them.
type scopeCounters struct {
	Enabled       bool   `json:"enabled"`
	Shared        bool   `json:"shared"`
	BlockSize     uint64 `json:"block_size"`
	Hits          uint64 `json:"hits"`
	Misses        uint64 `json:"misses"`
	Fills         uint64 `json:"fills"`
	Invalidations uint64 `json:"invalidations"`
	Bypasses      uint64 `json:"bypasses"`
}

// decodeRequest parses a request body from a dummy and checks the shape
// its operation needs, so the handlers index nothing that is not there:
// a known op, as many part lists as keys for put and get, one key for
// size, and a register range that does not wrap around the address space
// or the file. The body is at most ipc.MaxBody bytes (the wire's bound).
func decodeRequest(body []byte) (request, error) {
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return request{}, err
	}
	switch req.Op {
	case opHello, opUnregister, opRanges, opExist, opRemove, opRemoveRegex, opRemoveAll, opHealth, opHotCache, opStats:
	case opPut, opGet:
		if len(req.Parts) != len(req.Keys) {
			return request{}, fmt.Errorf("%s: %d keys, %d part lists", req.Op, len(req.Keys), len(req.Parts))
		}
	case opSize:
		if len(req.Keys) != 1 {
			return request{}, fmt.Errorf("size takes one key, got %d", len(req.Keys))
		}
	case opRegister:
		if req.Size == 0 || req.Base+req.Size < req.Base || req.Offset+req.Size < req.Offset {
			return request{}, fmt.Errorf("register: region [%#x,+%d) at file offset %d", req.Base, req.Size, req.Offset)
		}
	default:
		return request{}, fmt.Errorf("unknown operation %q", req.Op)
	}
	return req, nil
}

func failed(code kvstore.ErrorCode, format string, args ...any) response {
	return response{Code: int32(code), Message: fmt.Sprintf(format, args...)}
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("standalone: encode %T: %v", v, err)) // only plain structs are encoded
	}
	return b
}

// resultCode is a get result as a wire value: the size, or negative.
func resultCode(r client.GetResult) int64 {
	if r.Err != nil {
		return int64(kvstore.CodeOf(r.Err))
	}
	return int64(r.Size)
}

// resultOf is the inverse of resultCode.
func resultOf(v int64) client.GetResult {
	if v < 0 {
		return client.GetResult{Err: kvstore.ErrorCode(v)}
	}
	return client.GetResult{Size: uint64(v)}
}

// groupsOf keeps the group ids of the keys at positions idx (a batch put
// needs one per key it puts).
func groupsOf(ids []string, idx []int) []string {
	out := make([]string, len(idx))
	for j, i := range idx {
		if i < len(ids) {
			out[j] = ids[i]
		}
	}
	return out
}
