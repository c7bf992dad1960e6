package main

// #include "cgo.h"
import "C"

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"github.com/mooncake-go/mooncake/internal/logging"
	"github.com/mooncake-go/mooncake/transfer"
)

// engineSlot is a C-visible engine: created empty by mc_engine_create and
// started by mc_engine_initialize. It is reference counted: the C handle
// holds one reference (released by mc_engine_destroy) and every store or
// the collectives runtime given the engine holds another, so the engine
// closes only when the last of them lets go.
type engineSlot struct {
	mu   sync.Mutex
	e    *transfer.Engine
	refs int // 1 at creation; 0 once released for good
}

func newEngineSlot() *engineSlot { return &engineSlot{refs: 1} }

// retain adds a reference for a user of the started engine and returns
// the engine; nil when the slot has none (not initialized, or closed).
func (s *engineSlot) retain() *transfer.Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e == nil || s.refs == 0 {
		return nil
	}
	s.refs++
	return s.e
}

// release drops one reference; the last one closes the engine.
func (s *engineSlot) release() {
	s.mu.Lock()
	s.refs--
	e := s.e
	last := s.refs == 0
	s.mu.Unlock()
	if last && e != nil {
		e.Close()
	}
}

var engines handleTable[*engineSlot]

func (s *engineSlot) engine() *transfer.Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e
}

// engineFail records err as the thread's last error and returns its
// Transfer Engine error number.
func engineFail(err error) C.int {
	slog.Debug("capi: engine call failed", "err", err)
	return failed(C.int(transfer.CodeOf(err)), err)
}

var errNoEngine = &transfer.Error{Code: transfer.CodeInvalidArgument, Msg: "unknown, uninitialized or destroyed engine handle"}

// badArg is an invalid-argument error (-1) of the Transfer Engine's kind.
func badArg(format string, args ...any) error {
	return &transfer.Error{Code: transfer.CodeInvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

// noEngine is the failure of a call on a handle without a started engine.
func noEngine() C.int { return engineFail(errNoEngine) }

func slotOf(h C.uint64_t) *engineSlot {
	s, _ := engines.get(uint64(h))
	return s
}

// liveEngine returns the handle's started engine, or nil.
func liveEngine(h C.uint64_t) *transfer.Engine {
	s := slotOf(h)
	if s == nil {
		return nil
	}
	return s.engine()
}

//export mc_engine_create
func mc_engine_create() (ret C.uint64_t) {
	defer recoverTo(&ret, 0)
	return C.uint64_t(engines.put(newEngineSlot()))
}

//export mc_engine_initialize
func mc_engine_initialize(h C.uint64_t, localHostname, metadataServer, protocol, deviceName *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	s := slotOf(h)
	if s == nil {
		return noEngine()
	}
	if s.engine() != nil {
		return engineFail(fmt.Errorf("engine already initialized"))
	}
	e, err := transfer.New(transfer.Config{
		LocalHostname:  C.GoString(localHostname),
		MetadataServer: C.GoString(metadataServer),
		Protocol:       C.GoString(protocol),
		DeviceName:     C.GoString(deviceName),
	})
	if err != nil {
		return engineFail(err)
	}
	s.mu.Lock()
	s.e = e
	s.mu.Unlock()
	return 0
}

//export mc_engine_destroy
func mc_engine_destroy(h C.uint64_t) {
	defer recoverVoid()
	if s, ok := engines.take(uint64(h)); ok {
		s.release()
	}
}

//export mc_engine_get_rpc_port
func mc_engine_get_rpc_port(h C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	if e := liveEngine(h); e != nil {
		return C.int(e.RPCPort())
	}
	return failed(C.int(-1), errNoEngine)
}

//export mc_engine_segment_name
func mc_engine_segment_name(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	if e := liveEngine(h); e != nil {
		return C.CString(e.Name())
	}
	return failed[*C.char](nil, errNoEngine)
}

//export mc_engine_metrics_text
func mc_engine_metrics_text(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	if e := liveEngine(h); e != nil {
		return C.CString(e.MetricsText())
	}
	return failed[*C.char](nil, errNoEngine)
}

//export mc_engine_allocate_managed_buffer
func mc_engine_allocate_managed_buffer(h C.uint64_t, length C.uint64_t) (ret C.uint64_t) {
	defer recoverTo(&ret, 0)
	e := liveEngine(h)
	if e == nil {
		return failed(C.uint64_t(0), errNoEngine)
	}
	addr, err := e.AllocateManagedBuffer(uint64(length))
	if err != nil {
		engineFail(err)
		return 0
	}
	return C.uint64_t(addr)
}

//export mc_engine_free_managed_buffer
func mc_engine_free_managed_buffer(h C.uint64_t, addr C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return noEngine()
	}
	if err := e.FreeManagedBuffer(uintptr(addr)); err != nil {
		return engineFail(err)
	}
	return 0
}

//export mc_engine_register_memory
func mc_engine_register_memory(h C.uint64_t, addrs, lengths *C.mc_cu64, n C.int, location *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return noEngine()
	}
	if n < 0 {
		return engineFail(badArg("negative buffer count %d", n))
	}
	a, l := u64s(addrs, n), u64s(lengths, n)
	if len(a) != int(n) || len(l) != int(n) {
		return engineFail(fmt.Errorf("null address or length array"))
	}
	ptrs := make([]uintptr, n)
	for i := range ptrs {
		ptrs[i] = uintptr(a[i])
	}
	if err := e.BatchRegisterLocalMemory(ptrs, l, C.GoString(location)); err != nil {
		return engineFail(err)
	}
	return 0
}

//export mc_engine_unregister_memory
func mc_engine_unregister_memory(h C.uint64_t, addrs *C.mc_cu64, n C.int) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return noEngine()
	}
	if n < 0 {
		return engineFail(badArg("negative buffer count %d", n))
	}
	ptrs := make([]uintptr, n)
	for i, a := range u64s(addrs, n) {
		ptrs[i] = uintptr(a)
	}
	if err := e.BatchUnregisterLocalMemory(ptrs); err != nil {
		return engineFail(err)
	}
	return 0
}

// requests builds n requests of one opcode and transport hint (NULL or ""
// for the engine's choice) from C arrays.
func requests(opcode C.int, buffers, peerAddrs, lengths *C.uint64_t, n C.int, hint *C.mc_cchar) ([]transfer.Request, error) {
	if n <= 0 {
		return nil, fmt.Errorf("empty batch")
	}
	if opcode != C.int(transfer.OpRead) && opcode != C.int(transfer.OpWrite) {
		return nil, fmt.Errorf("bad opcode %d", opcode)
	}
	b, p, l := u64s(buffers, n), u64s(peerAddrs, n), u64s(lengths, n)
	if len(b) != int(n) || len(p) != int(n) || len(l) != int(n) {
		return nil, fmt.Errorf("null buffer, address or length array")
	}
	reqs := make([]transfer.Request, n)
	via := C.GoString(hint)
	for i := range reqs {
		reqs[i] = transfer.Request{Opcode: transfer.Opcode(opcode), Source: uintptr(b[i]), TargetOffset: p[i], Length: l[i], Transport: via}
	}
	return reqs, nil
}

//export mc_engine_transfer_sync
func mc_engine_transfer_sync(h C.uint64_t, target *C.mc_cchar, opcode C.int, buffers, peerAddrs, lengths *C.mc_cu64, n C.int, notifyName, notifyMsg, hint *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return noEngine()
	}
	reqs, err := requests(opcode, buffers, peerAddrs, lengths, n, hint)
	if err != nil {
		return engineFail(err)
	}
	tgt := C.GoString(target)
	if err := e.TransferSync(tgt, reqs); err != nil {
		return engineFail(err)
	}
	if notifyName != nil {
		if err := e.SendNotify(tgt, transfer.Notify{Name: C.GoString(notifyName), Msg: C.GoString(notifyMsg)}); err != nil {
			return engineFail(err)
		}
	}
	return 0
}

//export mc_engine_transfer_async
func mc_engine_transfer_async(h C.uint64_t, target *C.mc_cchar, opcode C.int, buffers, peerAddrs, lengths *C.mc_cu64, n C.int, hint *C.mc_cchar) (ret C.uint64_t) {
	defer recoverTo(&ret, 0)
	e := liveEngine(h)
	if e == nil {
		return failed(C.uint64_t(0), errNoEngine)
	}
	reqs, err := requests(opcode, buffers, peerAddrs, lengths, n, hint)
	if err != nil {
		engineFail(err)
		return 0
	}
	seg, err := e.CachedSegment(C.GoString(target))
	if err != nil {
		engineFail(err)
		return 0
	}
	for i := range reqs {
		reqs[i].Target = seg
	}
	id, err := e.AllocateBatch(len(reqs))
	if err != nil {
		engineFail(err)
		return 0
	}
	if err := e.SubmitTransfer(id, reqs); err != nil {
		e.FreeBatch(id)
		engineFail(err)
		return 0
	}
	return C.uint64_t(id)
}

//export mc_engine_wait_batches
func mc_engine_wait_batches(h C.uint64_t, ids *C.mc_cu64, n C.int) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return failed(C.int(-1), errNoEngine)
	}
	if n < 0 {
		return failed(C.int(-1), badArg("negative batch count %d", n))
	}
	rc := C.int(0)
	for _, id := range u64s(ids, n) {
		st, err := e.WaitBatch(transfer.BatchID(id))
		if err != nil {
			engineFail(err)
			rc = -1
			continue
		}
		e.FreeBatch(transfer.BatchID(id))
		if st.Status != transfer.StatusCompleted {
			engineFail(fmt.Errorf("batch %d: %s", id, st.Status))
			rc = -1
		}
	}
	return rc
}

//export mc_engine_check_batch
func mc_engine_check_batch(h C.uint64_t, id C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return failed(C.int(-1), errNoEngine)
	}
	st, err := e.BatchStatus(transfer.BatchID(id))
	if err != nil {
		engineFail(err)
		return -1
	}
	switch st.Status {
	case transfer.StatusCompleted:
		e.FreeBatch(transfer.BatchID(id))
		return 1
	case transfer.StatusFailed, transfer.StatusTimeout:
		// The batch is final only once every task is; until then it
		// reads as pending so it can still be freed afterwards.
		if e.FreeBatch(transfer.BatchID(id)) != nil {
			return 0
		}
		engineFail(fmt.Errorf("batch %d: %s", id, st.Status))
		if st.Status == transfer.StatusTimeout {
			return -2
		}
		return -1
	default:
		return 0
	}
}

//export mc_engine_first_buffer_address
func mc_engine_first_buffer_address(h C.uint64_t, segment *C.mc_cchar) (ret C.uint64_t) {
	defer recoverTo(&ret, 0)
	e := liveEngine(h)
	if e == nil {
		return failed(C.uint64_t(0), errNoEngine)
	}
	seg, err := e.CachedSegment(C.GoString(segment))
	if err != nil {
		engineFail(err)
		return 0
	}
	d, err := e.SegmentDescriptor(seg)
	if err == nil && len(d.Buffers) == 0 {
		err = fmt.Errorf("segment %q has no registered buffer", C.GoString(segment))
	}
	if err != nil {
		engineFail(err)
		return 0
	}
	return C.uint64_t(d.Buffers[0].Addr)
}

//export mc_engine_get_notifies
func mc_engine_get_notifies(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	e := liveEngine(h)
	if e == nil {
		return failed[*C.char](nil, errNoEngine)
	}
	ns := e.GetNotifies()
	if ns == nil {
		ns = []transfer.Notify{}
	}
	b, _ := json.Marshal(ns)
	return C.CString(string(b))
}

//export mc_engine_send_notify
func mc_engine_send_notify(h C.uint64_t, target, name, msg *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return noEngine()
	}
	if err := e.SendNotify(C.GoString(target), transfer.Notify{Name: C.GoString(name), Msg: C.GoString(msg)}); err != nil {
		return engineFail(err)
	}
	return 0
}

//export mc_engine_send_probe
func mc_engine_send_probe(h C.uint64_t, peer *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return noEngine()
	}
	if err := e.Probe(C.GoString(peer)); err != nil {
		return engineFail(err)
	}
	return 0
}

// mc_local_topology returns transfer.LocalTopology.
//
//export mc_local_topology
func mc_local_topology() (ret *C.char) {
	defer recoverTo(&ret, nil)
	return C.CString(transfer.LocalTopology())
}

func init() { logging.Setup() }

//export mc_engine_write_local
func mc_engine_write_local(h, addr C.uint64_t, src *C.mc_cvoid, length C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return noEngine()
	}
	if src == nil && length > 0 {
		return engineFail(badArg("src is NULL"))
	}
	if err := e.WriteLocal(uintptr(addr), cslice[byte](unsafe.Pointer(src), int(length))); err != nil {
		return engineFail(err)
	}
	return 0
}

//export mc_engine_read_local
func mc_engine_read_local(h C.uint64_t, addr C.uint64_t, dst unsafe.Pointer, length C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	e := liveEngine(h)
	if e == nil {
		return noEngine()
	}
	if dst == nil && length > 0 {
		return engineFail(badArg("dst is NULL"))
	}
	if err := e.ReadLocal(uintptr(addr), cslice[byte](dst, int(length))); err != nil {
		return engineFail(err)
	}
	return 0
}
