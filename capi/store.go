package main

// #include "cgo.h"
// static uint64_t call_store_alloc(mc_store_alloc_fn fn, int index, uint64_t size) {
//     return fn(index, size);
// }
// static void call_store_alloc_all(mc_store_alloc_all_fn fn, int first, int count, const int64_t *sizes, uint64_t *addrs) {
//     fn(first, count, sizes, addrs);
// }
// static void free_addr(uint64_t p) { free((void *)(uintptr_t)p); }
import "C"

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
	"github.com/mooncake-go/mooncake/kvstore/standalone"
)

// storeSlot is a C-visible store client, created empty and set up later.
type storeSlot struct {
	mu     sync.Mutex
	c      *client.Client
	hot    *hotcache.Client   // c behind a hot cache (MC_STORE_LOCAL_HOT_CACHE_SIZE)
	d      *standalone.Dummy  // set by setup_dummy instead of c
	engine *engineSlot        // the engine given to setup, retained until close
	fleet  client.FleetConfig // mc_store_set_fleet_options, for the next setup
}

var stores handleTable[*storeSlot]

func storeOf(h C.uint64_t) *client.Client {
	s, ok := stores.get(uint64(h))
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

// code converts a Go error to the int a C caller receives: 0 for nil,
// else its store error number, with its message recorded as the thread's
// last error (so a batch call leaves the message of its last failed key).
func code(err error) C.int {
	if err == nil {
		return 0
	}
	return failed(C.int(kvstore.CodeOf(err)), err)
}

// notReady (-600) answers a call on a handle that cannot serve it.
const notReady = C.int(kvstore.InvalidParams)

var (
	errUnknownStore = fmt.Errorf("%w: unknown or closed store handle", kvstore.InvalidParams)
	errSetUpAlready = fmt.Errorf("%w: the store handle is set up already (a closed one cannot be set up again)", kvstore.InvalidParams)
	errBadParts     = fmt.Errorf("%w: bad part counts, pointers or sizes, or a malformed config_json", kvstore.InvalidParams)
	errNotReady     = fmt.Errorf("%w: the store handle is not set up for this call (or closed), or a required argument is NULL or out of range", kvstore.InvalidParams)
)

// refused records errNotReady as the thread's last error and returns
// notReady: the failure of a call the handle cannot serve.
func refused() C.int { return failed(notReady, errNotReady) }

//export mc_store_create
func mc_store_create() (ret C.uint64_t) {
	defer recoverTo(&ret, 0)
	return C.uint64_t(stores.put(&storeSlot{}))
}

//export mc_store_setup
func mc_store_setup(h C.uint64_t, args *C.mc_cstore_setup_args) (ret C.int) {
	defer recoverTo(&ret, -1)
	s, ok := stores.get(uint64(h))
	if !ok {
		return storeFail(errUnknownStore, nil)
	}
	if args == nil {
		return storeFail(fmt.Errorf("%w: setup args is NULL", kvstore.InvalidParams), nil)
	}
	cfg := client.Config{
		LocalHostname:     C.GoString(args.local_hostname),
		MetadataServer:    C.GoString(args.metadata_server),
		GlobalSegmentSize: uint64(args.global_segment_size),
		LocalBufferSize:   uint64(args.local_buffer_size),
		Protocol:          C.GoString(args.protocol),
		DeviceName:        C.GoString(args.device_name),
		MasterServerAddr:  C.GoString(args.master_server_addr),
		TenantID:          C.GoString(args.tenant_id),
		HugePageSize:      uint64(args.hugepage_size),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil || s.d != nil {
		return storeFail(errSetUpAlready, nil)
	}
	cfg.Fleet = s.fleet
	var es *engineSlot
	if engine := args.engine; engine != 0 {
		if es = slotOf(engine); es != nil {
			cfg.Engine = es.retain()
		}
		if cfg.Engine == nil {
			return storeFail(fmt.Errorf("%w: engine handle %d is not an initialized engine", kvstore.InvalidParams, engine), nil)
		}
	}
	c, err := client.New(cfg)
	if err != nil {
		if es != nil {
			es.release()
		}
		slog.Error("store setup failed", "err", err)
		return storeFail(err, nil)
	}
	s.c, s.engine = c, es
	s.hot = withHotCache(c)
	return 0
}

//export mc_store_close
func mc_store_close(h C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	s, ok := stores.take(uint64(h))
	if !ok {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.hot != nil:
		s.hot.Close() // the client, then the cache
	case s.c != nil:
		s.c.Close()
	}
	if s.d != nil {
		s.d.Close()
	}
	if s.engine != nil {
		s.engine.release() // after the client stopped using it
		s.engine = nil
	}
	return 0
}

//export mc_store_health_check
func mc_store_health_check(h C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := opsOf(h)
	if c == nil {
		return client.NotInitialized
	}
	return C.int(c.Health())
}

//export mc_store_get_hostname
func mc_store_get_hostname(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	c := opsOf(h)
	if c == nil {
		return C.CString("")
	}
	return C.CString(c.Hostname())
}

// partsOf splits flattened (ptr, size) arrays into per-key part lists.
func partsOf(counts *C.int, ptrs, sizes *C.uint64_t, n C.int) ([][]client.Part, bool) {
	if counts == nil || n <= 0 {
		return nil, false
	}
	cs := unsafe.Slice(counts, int(n))
	total := 0
	for _, c := range cs {
		if c < 0 {
			return nil, false
		}
		total += int(c)
	}
	p, s := u64s(ptrs, C.int(total)), u64s(sizes, C.int(total))
	if len(p) != total || len(s) != total {
		return nil, total == 0 && (ptrs == nil || sizes == nil) && allZero(cs)
	}
	out := make([][]client.Part, n)
	k := 0
	for i, c := range cs {
		out[i] = make([]client.Part, c)
		for j := range out[i] {
			out[i][j] = client.Part{Addr: uintptr(p[k]), Size: s[k]}
			k++
		}
	}
	return out, true
}

func allZero(cs []C.int) bool {
	for _, c := range cs {
		if c != 0 {
			return false
		}
	}
	return true
}

// Flags of mc_store_put.
const (
	putUpsert   = 1
	putZeroCopy = 2
)

//export mc_store_put
func mc_store_put(h C.uint64_t, n C.int, keys **C.mc_cchar, partCounts *C.mc_cint, ptrs, sizes *C.mc_cu64, configJSON *C.mc_cchar, flags C.int, results *C.int) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := opsOf(h)
	res := cslice[C.int](unsafe.Pointer(results), int(n))
	if c == nil || results == nil || n <= 0 {
		fillC(res, notReady)
		return refused()
	}
	parts, ok := partsOf(partCounts, ptrs, sizes, n)
	cfg := client.DefaultReplicateConfig()
	if configJSON != nil {
		if err := json.Unmarshal([]byte(C.GoString(configJSON)), &cfg); err != nil {
			ok = false
		}
	}
	if !ok {
		fillC(res, code(errBadParts))
		return C.int(kvstore.InvalidParams)
	}
	errs := c.BatchPut(goStrings(keys, n), parts, cfg, client.PutOptions{Upsert: flags&putUpsert != 0, ZeroCopy: flags&putZeroCopy != 0})
	first := C.int(0)
	for i, err := range errs {
		res[i] = code(err)
		if first == 0 {
			first = res[i]
		}
	}
	return first
}

//export mc_store_get_into
func mc_store_get_into(h C.uint64_t, n C.int, keys **C.mc_cchar, partCounts *C.mc_cint, ptrs, sizes *C.mc_cu64, zeroCopy C.int, results *C.int64_t) {
	defer recoverVoid()
	c := opsOf(h)
	res := cslice[C.int64_t](unsafe.Pointer(results), int(n))
	if c == nil || results == nil || n <= 0 {
		fillC(res, C.int64_t(refused()))
		return
	}
	parts, ok := partsOf(partCounts, ptrs, sizes, n)
	if !ok {
		fillC(res, C.int64_t(code(errBadParts)))
		return
	}
	for i, r := range c.BatchGetInto(goStrings(keys, n), parts, zeroCopy != 0) {
		res[i] = getResult(r)
	}
}

//export mc_store_get
func mc_store_get(h C.uint64_t, n C.int, keys **C.mc_cchar, outPtrs *C.uint64_t, results *C.int64_t) {
	defer recoverVoid()
	if outPtrs == nil {
		fillC(cslice[C.int64_t](unsafe.Pointer(results), int(n)), C.int64_t(refused()))
		return
	}
	out := cslice[C.uint64_t](unsafe.Pointer(outPtrs), int(n))
	for i := range out {
		out[i] = 0
	}
	getWith(h, n, keys, results, func(i int, size uint64) uintptr {
		p := C.malloc(C.size_t(max(size, 1)))
		out[i] = C.uint64_t(uintptr(p))
		return uintptr(p)
	})
	for i, r := range cslice[C.int64_t](unsafe.Pointer(results), int(n)) {
		if r < 0 && out[i] != 0 {
			C.free_addr(out[i])
			out[i] = 0
		}
	}
}

//export mc_store_get_with_allocator
func mc_store_get_with_allocator(h C.uint64_t, n C.int, keys **C.mc_cchar, alloc C.mc_store_alloc_fn, results *C.int64_t) {
	defer recoverVoid()
	if alloc == nil {
		fillC(cslice[C.int64_t](unsafe.Pointer(results), int(n)), C.int64_t(code(fmt.Errorf("%w: alloc is NULL", kvstore.InvalidParams))))
		return
	}
	getWith(h, n, keys, results, func(i int, size uint64) uintptr {
		return uintptr(C.call_store_alloc(alloc, C.int(i), C.uint64_t(size)))
	})
}

// sizedGetter is a store client that asks for a whole batch's memory in
// one call. hotcache.Client defines its own BatchGetSized, which reads
// through its cache, over the one of the client.Client it embeds.
type sizedGetter interface {
	BatchGetSized(keys []string, alloc client.SizedAllocator) []client.GetResult
}

var (
	_ sizedGetter = (*client.Client)(nil)
	_ sizedGetter = (*hotcache.Client)(nil)
)

//export mc_store_get_sized
func mc_store_get_sized(h C.uint64_t, n C.int, keys **C.mc_cchar, alloc C.mc_store_alloc_all_fn, results *C.int64_t) {
	defer recoverVoid()
	res := cslice[C.int64_t](unsafe.Pointer(results), int(n))
	if alloc == nil {
		fillC(res, C.int64_t(code(fmt.Errorf("%w: alloc is NULL", kvstore.InvalidParams))))
		return
	}
	c := opsOf(h)
	if c == nil || results == nil || n <= 0 {
		fillC(res, C.int64_t(refused()))
		return
	}
	// C memory for the sizes and addresses: the callback may keep neither,
	// but it is C code, which must not be handed Go memory it writes to.
	sizes := cslice[C.int64_t](C.calloc(C.size_t(n), 8), int(n))
	addrs := cslice[C.uint64_t](C.calloc(C.size_t(n), 8), int(n))
	defer C.free(unsafe.Pointer(&sizes[0]))
	defer C.free(unsafe.Pointer(&addrs[0]))
	var rs []client.GetResult
	// A client set up in process, with or without the hot cache, asks
	// once per batch; a dummy has no BatchGetSized.
	if sg, ok := c.(sizedGetter); ok {
		rs = sg.BatchGetSized(goStrings(keys, n), func(got []int64, dests [][]client.Part) {
			for i, sz := range got {
				sizes[i] = C.int64_t(sz)
			}
			C.call_store_alloc_all(alloc, 0, n, &sizes[0], &addrs[0])
			for i := range dests {
				if got[i] >= 0 && addrs[i] != 0 {
					dests[i] = []client.Part{{Addr: uintptr(addrs[i]), Size: uint64(got[i])}}
				}
			}
		})
	} else {
		// A dummy learns sizes key by key: one call per key found, on
		// this thread, for entry i alone.
		var mu sync.Mutex
		rs = c.BatchGet(goStrings(keys, n), func(i int, size uint64) ([]client.Part, error) {
			mu.Lock()
			defer mu.Unlock()
			sizes[i] = C.int64_t(size)
			C.call_store_alloc_all(alloc, C.int(i), 1, &sizes[0], &addrs[0])
			if addrs[i] == 0 {
				return nil, kvstore.InternalError
			}
			return []client.Part{{Addr: uintptr(addrs[i]), Size: size}}, nil
		})
	}
	for i, r := range rs {
		res[i] = getResult(r)
	}
}

// getWith reads n objects into buffers from alloc(i, size), called once
// per key whose object was found (0: allocation failed); results[i] is the
// size read or an error number.
func getWith(h C.uint64_t, n C.int, keys **C.char, results *C.int64_t, alloc func(i int, size uint64) uintptr) {
	c := opsOf(h)
	res := cslice[C.int64_t](unsafe.Pointer(results), int(n))
	if c == nil || results == nil || n <= 0 {
		fillC(res, C.int64_t(refused()))
		return
	}
	rs := c.BatchGet(goStrings(keys, n), func(i int, size uint64) ([]client.Part, error) {
		p := alloc(i, size)
		if p == 0 {
			return nil, kvstore.InternalError
		}
		return []client.Part{{Addr: p, Size: size}}, nil
	})
	for i, r := range rs {
		res[i] = getResult(r)
	}
}

//export mc_store_get_ranges
func mc_store_get_ranges(h C.uint64_t, n C.int, keys **C.mc_cchar, dsts, srcOffsets, sizes *C.mc_cu64, results *C.int64_t) {
	defer recoverVoid()
	c := opsOf(h)
	res := cslice[C.int64_t](unsafe.Pointer(results), int(n))
	d, o, s := u64s(dsts, n), u64s(srcOffsets, n), u64s(sizes, n)
	if c == nil || results == nil || n <= 0 || len(d) != int(n) || len(o) != int(n) || len(s) != int(n) {
		fillC(res, C.int64_t(refused()))
		return
	}
	names := goStrings(keys, n)
	ranges := make([]client.Range, n)
	for i := range ranges {
		ranges[i] = client.Range{Key: names[i], Dst: uintptr(d[i]), SrcOffset: o[i], Size: s[i]}
	}
	for i, r := range c.GetRanges(ranges) {
		res[i] = getResult(r)
	}
}

func getResult(r client.GetResult) C.int64_t {
	if r.Err != nil {
		return C.int64_t(code(r.Err))
	}
	return C.int64_t(r.Size)
}

//export mc_store_exist
func mc_store_exist(h C.uint64_t, n C.int, keys **C.mc_cchar, results *C.int) {
	defer recoverVoid()
	c := opsOf(h)
	res := cslice[C.int](unsafe.Pointer(results), int(n))
	if c == nil || results == nil {
		fillC(res, refused())
		return
	}
	for i, v := range c.BatchExist(goStrings(keys, n)) {
		res[i] = C.int(v)
	}
}

//export mc_store_is_exist
func mc_store_is_exist(h C.uint64_t, key *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := opsOf(h)
	if c == nil {
		return refused()
	}
	return C.int(c.BatchExist([]string{C.GoString(key)})[0])
}

//export mc_store_get_size
func mc_store_get_size(h C.uint64_t, key *C.mc_cchar) (ret C.int64_t) {
	defer recoverTo(&ret, -1)
	c := opsOf(h)
	if c == nil {
		return C.int64_t(refused())
	}
	n, err := c.Size(C.GoString(key))
	if err != nil {
		return C.int64_t(code(err))
	}
	return C.int64_t(n)
}

// replicaDesc is one replica in mc_store_replica_desc's JSON.
type replicaDesc struct {
	Status            int32  `json:"status"`
	Size              uint64 `json:"size"`
	BufferAddress     uint64 `json:"buffer_address"`
	TransportEndpoint string `json:"transport_endpoint"`
	SegmentName       string `json:"segment_name"` // the storage owner (its client's hostname)
	ReplicaType       int32  `json:"replica_type"` // 0 memory, 1 shared-FS disk, 2 local disk
	DiskClientID      string `json:"client_id,omitempty"`
	FilePath          string `json:"file_path,omitempty"` // a DISK replica's file
}

// replicaList is one key's entry in mc_store_replica_desc's JSON.
type replicaList struct {
	Replicas  []replicaDesc `json:"replicas,omitempty"`
	ErrorCode int32         `json:"error_code,omitempty"`
}

//export mc_store_replica_desc
func mc_store_replica_desc(h C.uint64_t, n C.int, keys **C.mc_cchar) (ret *C.char) {
	defer recoverTo(&ret, nil)
	c := storeOf(h)
	if c == nil {
		return failed[*C.char](nil, errNotReady)
	}
	lists := c.ReplicaLists(goStrings(keys, n))
	out := make([]replicaList, len(lists))
	for i, l := range lists {
		if l.GetErrorCode() != 0 {
			out[i].ErrorCode = l.GetErrorCode()
			continue
		}
		out[i].Replicas = []replicaDesc{}
		for _, r := range l.GetReplicas() {
			out[i].Replicas = append(out[i].Replicas, replicaDesc{int32(r.GetStatus()), r.GetSize(), r.GetBufferAddress(),
				r.GetTransportEndpoint(), r.GetSegmentName(), int32(r.GetReplicaType()), r.GetDiskClientId(),
				c.DiskFilePath(r.GetFilePath())})
		}
	}
	b, _ := json.Marshal(out)
	return C.CString(string(b))
}

//export mc_store_remove
func mc_store_remove(h C.uint64_t, n C.int, keys **C.mc_cchar, force C.int, results *C.int) {
	defer recoverVoid()
	c := opsOf(h)
	res := cslice[C.int](unsafe.Pointer(results), int(n))
	if c == nil || results == nil {
		fillC(res, refused())
		return
	}
	for i, v := range c.BatchRemove(goStrings(keys, n), force != 0) {
		res[i] = C.int(v)
	}
}

//export mc_store_remove_by_regex
func mc_store_remove_by_regex(h C.uint64_t, pattern *C.mc_cchar, force C.int) (ret C.int64_t) {
	defer recoverTo(&ret, -1)
	c := opsOf(h)
	if c == nil {
		return C.int64_t(refused())
	}
	n, err := c.RemoveByRegex(C.GoString(pattern), force != 0)
	if err != nil {
		return C.int64_t(code(err))
	}
	return C.int64_t(n)
}

//export mc_store_remove_all
func mc_store_remove_all(h C.uint64_t, force C.int) (ret C.int64_t) {
	defer recoverTo(&ret, -1)
	c := opsOf(h)
	if c == nil {
		return C.int64_t(refused())
	}
	n, err := c.RemoveAll(force != 0)
	if err != nil {
		return C.int64_t(code(err))
	}
	return C.int64_t(n)
}

//export mc_store_register_buffer
func mc_store_register_buffer(h C.uint64_t, ptr, size C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := opsOf(h)
	if c == nil {
		return refused()
	}
	return code(c.RegisterBuffer(uintptr(ptr), uint64(size)))
}

//export mc_store_unregister_buffer
func mc_store_unregister_buffer(h C.uint64_t, ptr C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := opsOf(h)
	if c == nil {
		return refused()
	}
	return code(c.UnregisterBuffer(uintptr(ptr)))
}

func fillC[T any](s []T, v T) {
	for i := range s {
		s[i] = v
	}
}
