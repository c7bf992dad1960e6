package main

// #include "cgo.h"
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// This file exports the store's session calls (layer-wise loading) and
// replica management (batch_replica_clear, copy and move tasks).

// spansOf splits flattened (ptr, size, offset) arrays into per-key spans.
func spansOf(counts *C.int, ptrs, sizes, offsets *C.uint64_t, n C.int) ([][]client.Span, bool) {
	parts, ok := partsOf(counts, ptrs, sizes, n)
	if !ok {
		return nil, false
	}
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	offs := u64s(offsets, C.int(total))
	if len(offs) != total {
		return nil, false
	}
	out := make([][]client.Span, len(parts))
	k := 0
	for i, p := range parts {
		out[i] = make([]client.Span, len(p))
		for j, part := range p {
			out[i][j] = client.Span{Addr: part.Addr, Size: part.Size, Offset: offs[k]}
			k++
		}
	}
	return out, true
}

// putCodes stores one code per error in results.
func putCodes(results *C.int, errs []error) {
	res := unsafe.Slice(results, len(errs))
	for i, err := range errs {
		res[i] = code(err)
	}
}

// putSizes stores bytes moved or an error per key in results.
func putSizes(results *C.int64_t, rs []client.GetResult) {
	res := unsafe.Slice(results, len(rs))
	for i, r := range rs {
		res[i] = getResult(r)
	}
}

//export mc_store_get_session_start
func mc_store_get_session_start(h C.uint64_t, n C.int, keys **C.mc_cchar, results *C.int) {
	defer recoverVoid()
	c := storeOf(h)
	if results == nil || n <= 0 {
		return
	}
	if c == nil {
		fillC(unsafe.Slice(results, int(n)), refused())
		return
	}
	putCodes(results, c.GetSessionStart(goStrings(keys, n)))
}

// sessionRanges runs a ranged session call.
func sessionRanges(h C.uint64_t, n C.int, keys **C.char, counts *C.int, ptrs, sizes, offsets *C.uint64_t,
	results *C.int64_t, run func(c *client.Client, keys []string, spans [][]client.Span) []client.GetResult) {
	if results == nil || n <= 0 {
		return
	}
	res := unsafe.Slice(results, int(n))
	c := storeOf(h)
	if c == nil {
		fillC(res, C.int64_t(refused()))
		return
	}
	spans, ok := spansOf(counts, ptrs, sizes, offsets, n)
	if !ok {
		fillC(res, C.int64_t(code(fmt.Errorf("%w: bad span counts, pointers, sizes or offsets", kvstore.InvalidParams))))
		return
	}
	putSizes(results, run(c, goStrings(keys, n), spans))
}

//export mc_store_get_session_ranges
func mc_store_get_session_ranges(h C.uint64_t, n C.int, keys **C.mc_cchar, spanCounts *C.mc_cint, ptrs, sizes, srcOffsets *C.mc_cu64, results *C.int64_t) {
	defer recoverVoid()
	sessionRanges(h, n, keys, spanCounts, ptrs, sizes, srcOffsets, results, (*client.Client).GetSessionRanges)
}

//export mc_store_get_session_end
func mc_store_get_session_end(h C.uint64_t, n C.int, keys **C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil {
		return failed(C.int(kvstore.InternalError), errNotReady) // -1, as mooncake.h documents
	}
	c.GetSessionEnd(goStrings(keys, n))
	return 0
}

//export mc_store_put_session_start
func mc_store_put_session_start(h C.uint64_t, n C.int, keys **C.mc_cchar, sizes *C.mc_cu64, configJSON *C.mc_cchar, results *C.int) {
	defer recoverVoid()
	if results == nil || n <= 0 {
		return
	}
	res := unsafe.Slice(results, int(n))
	c := storeOf(h)
	if c == nil {
		fillC(res, refused())
		return
	}
	cfg := client.DefaultReplicateConfig()
	sz := u64s(sizes, n)
	if configJSON != nil && json.Unmarshal([]byte(C.GoString(configJSON)), &cfg) != nil || len(sz) != int(n) {
		fillC(res, code(fmt.Errorf("%w: a NULL sizes array or a malformed config_json", kvstore.InvalidParams)))
		return
	}
	putCodes(results, c.PutSessionStart(goStrings(keys, n), sz, cfg))
}

//export mc_store_put_session_ranges
func mc_store_put_session_ranges(h C.uint64_t, n C.int, keys **C.mc_cchar, spanCounts *C.mc_cint, ptrs, sizes, dstOffsets *C.mc_cu64, results *C.int64_t) {
	defer recoverVoid()
	sessionRanges(h, n, keys, spanCounts, ptrs, sizes, dstOffsets, results, (*client.Client).PutSessionRanges)
}

// sessionCodes runs a per-key session call that returns a code per key.
func sessionCodes(h C.uint64_t, n C.int, keys **C.char, results *C.int, run func(c *client.Client, keys []string) []error) {
	if results == nil || n <= 0 {
		return
	}
	c := storeOf(h)
	if c == nil {
		fillC(unsafe.Slice(results, int(n)), refused())
		return
	}
	putCodes(results, run(c, goStrings(keys, n)))
}

//export mc_store_put_session_end
func mc_store_put_session_end(h C.uint64_t, n C.int, keys **C.mc_cchar, results *C.int) {
	defer recoverVoid()
	defer invalidateHot(h, goStrings(keys, n)) // the objects are new: no cached copy of old ones
	sessionCodes(h, n, keys, results, (*client.Client).PutSessionEnd)
}

//export mc_store_put_session_revoke
func mc_store_put_session_revoke(h C.uint64_t, n C.int, keys **C.mc_cchar, results *C.int) {
	defer recoverVoid()
	sessionCodes(h, n, keys, results, (*client.Client).PutSessionRevoke)
}

//export mc_store_replica_clear
func mc_store_replica_clear(h C.uint64_t, n C.int, keys **C.mc_cchar, segment *C.mc_cchar, cleared *C.int) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil || cleared == nil || n <= 0 {
		return refused()
	}
	done, err := c.BatchReplicaClear(goStrings(keys, n), C.GoString(segment))
	if err != nil {
		return code(err)
	}
	out := unsafe.Slice(cleared, int(n))
	for i, d := range done {
		out[i] = 0
		if d {
			out[i] = 1
		}
	}
	return 0
}

// taskCreated stores a created task's id.
func taskCreated(id client.TaskID, err error, hi, lo *C.uint64_t) C.int {
	if err != nil {
		return code(err)
	}
	*hi, *lo = C.uint64_t(id.Hi), C.uint64_t(id.Lo)
	return 0
}

//export mc_store_create_copy_task
func mc_store_create_copy_task(h C.uint64_t, key *C.mc_cchar, n C.int, targets **C.mc_cchar, hi, lo *C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil || hi == nil || lo == nil {
		return refused()
	}
	id, err := c.CreateCopyTask(C.GoString(key), goStrings(targets, n))
	return taskCreated(id, err, hi, lo)
}

//export mc_store_create_move_task
func mc_store_create_move_task(h C.uint64_t, key, source, target *C.mc_cchar, hi, lo *C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil || hi == nil || lo == nil {
		return refused()
	}
	id, err := c.CreateMoveTask(C.GoString(key), C.GoString(source), C.GoString(target))
	return taskCreated(id, err, hi, lo)
}

// taskJSON is mc_store_query_task's answer.
type taskJSON struct {
	ErrorCode      int32  `json:"error_code"`
	Hi             uint64 `json:"id_hi,omitempty"`
	Lo             uint64 `json:"id_lo,omitempty"`
	Type           int32  `json:"type"`
	Status         int32  `json:"status"`
	Created        uint64 `json:"created_at_ms_epoch"`
	Updated        uint64 `json:"last_updated_at_ms_epoch"`
	AssignedClient string `json:"assigned_client"`
	Message        string `json:"message"`
}

//export mc_store_query_task
func mc_store_query_task(h C.uint64_t, hi, lo C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	var out taskJSON
	if c := storeOf(h); c == nil {
		out.ErrorCode = int32(refused())
	} else if q, err := c.QueryTask(client.TaskID{Hi: uint64(hi), Lo: uint64(lo)}); err != nil {
		out.ErrorCode = int32(code(err))
	} else {
		out = taskJSON{Hi: q.GetId().GetHi(), Lo: q.GetId().GetLo(), Type: int32(q.GetType()), Status: int32(q.GetStatus()),
			Created: q.GetCreatedAtMsEpoch(), Updated: q.GetLastUpdatedAtMsEpoch(),
			AssignedClient: q.GetAssignedClient(), Message: q.GetMessage()}
	}
	b, _ := json.Marshal(out)
	return C.CString(string(b))
}
