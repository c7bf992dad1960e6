package main

/*
#include "cgo.h"

static int mc_pg_call_set(mc_pg_store_set_fn f, void *ctx, const char *k, const char *v, uint64_t n) {
	return f(ctx, k, v, n);
}
static int64_t mc_pg_call_get(mc_pg_store_get_fn f, void *ctx, const char *k, char *buf, uint64_t cap, int64_t ms) {
	return f(ctx, k, buf, cap, ms);
}
static int mc_pg_call_add(mc_pg_store_add_fn f, void *ctx, const char *k, int64_t delta, int64_t *out) {
	return f(ctx, k, delta, out);
}
static void mc_pg_call_done(mc_pg_done_fn f, void *ctx, int st, const char *msg, uint64_t failed, uint64_t epoch, uint64_t ran) {
	f(ctx, st, msg, failed, epoch, ran);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/backend"
	"github.com/mooncake-go/mooncake/transfer"
)

// Marshalling only: the collectives runtime is package backend.

// pgRuntime is the process's one collectives runtime.
var pgRuntime = backend.NewRuntime()

var pgGroups handleTable[*backend.Group]

// pgEngine is the engine given to mc_pg_set_transfer_engine, retained for
// as long as the runtime uses it (the runtime lives as long as the
// process, so until it is replaced or cleared).
var (
	pgEngineMu sync.Mutex
	pgEngine   *engineSlot
)

func pgGroup(group C.uint64_t) (*backend.Group, error) {
	g, ok := pgGroups.get(uint64(group))
	if !ok {
		return nil, fmt.Errorf("%w: unknown process group handle %d", backend.ErrClosed, group)
	}
	return g, nil
}

// Status numbers of the collectives calls (see mooncake.h).
const (
	pgOK      = 0
	pgInvalid = -1
	pgPeer    = -2
	pgClosed  = -3
	pgBroken  = -4
	pgOther   = -5
)

func pgStatus(err error) C.int {
	switch {
	case err == nil:
		return pgOK
	case errors.Is(err, backend.ErrInvalid):
		return pgInvalid
	case errors.Is(err, backend.ErrBroken):
		return pgBroken
	case errors.Is(err, backend.ErrPeer):
		return pgPeer
	case errors.Is(err, backend.ErrClosed):
		return pgClosed
	}
	return pgOther
}

// pgFail records err's message (thread's last error, *errOut if non-NULL)
// and returns its status.
func pgFail(err error, errOut **C.char) C.int {
	return failedOut(pgStatus(err), err, errOut)
}

//export mc_pg_set_host_ip
func mc_pg_set_host_ip(ip *C.mc_cchar, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	if err := pgRuntime.SetHostIP(C.GoString(ip)); err != nil {
		return pgFail(err, errOut)
	}
	return pgOK
}

//export mc_pg_set_device_filter
func mc_pg_set_device_filter(names *C.mc_ccstr, n C.int, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	var f []string
	if n > 0 {
		for _, p := range unsafe.Slice(names, int(n)) {
			f = append(f, C.GoString(p))
		}
	}
	if err := pgRuntime.SetDeviceFilter(f); err != nil {
		return pgFail(err, errOut)
	}
	return pgOK
}

//export mc_pg_set_transfer_engine
func mc_pg_set_transfer_engine(engine C.uint64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	pgEngineMu.Lock()
	defer pgEngineMu.Unlock()
	var slot *engineSlot
	var e *transfer.Engine
	if engine != 0 {
		if slot = slotOf(engine); slot != nil {
			e = slot.retain()
		}
		if e == nil {
			return pgFail(fmt.Errorf("%w: engine handle %d is not an initialised transfer engine", backend.ErrInvalid, engine), errOut)
		}
	}
	if err := pgRuntime.SetEngine(e); err != nil {
		if slot != nil {
			slot.release()
		}
		return pgFail(err, errOut)
	}
	if pgEngine != nil {
		pgEngine.release()
	}
	pgEngine = slot
	return pgOK
}

//export mc_pg_set_collective_timeout_us
func mc_pg_set_collective_timeout_us(us C.int64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	if err := pgRuntime.SetCollectiveTimeout(time.Duration(us) * time.Microsecond); err != nil {
		return pgFail(err, errOut)
	}
	return pgOK
}

//export mc_pg_set_p2p_timeout_us
func mc_pg_set_p2p_timeout_us(us C.int64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	if err := pgRuntime.SetP2PTimeout(time.Duration(us) * time.Microsecond); err != nil {
		return pgFail(err, errOut)
	}
	return pgOK
}

//export mc_pg_set_hang_timeout_us
func mc_pg_set_hang_timeout_us(us C.int64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	if err := pgRuntime.SetHangTimeout(time.Duration(us) * time.Microsecond); err != nil {
		return pgFail(err, errOut)
	}
	return pgOK
}

//export mc_pg_set_fault_reconciliation_window_us
func mc_pg_set_fault_reconciliation_window_us(us C.int64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	if err := pgRuntime.SetFaultReconciliationWindow(time.Duration(us) * time.Microsecond); err != nil {
		return pgFail(err, errOut)
	}
	return pgOK
}

// cStore adapts the caller's store callbacks to backend.Store; with an
// add callback, cAddStore adapts them to backend.CounterStore.
type cStore struct {
	ctx unsafe.Pointer
	set C.mc_pg_store_set_fn
	get C.mc_pg_store_get_fn
}

type cAddStore struct {
	cStore
	add C.mc_pg_store_add_fn
}

func (s cAddStore) Add(key string, delta int64) (int64, error) {
	k := C.CString(key)
	defer C.free(unsafe.Pointer(k))
	var out C.int64_t
	if C.mc_pg_call_add(s.add, s.ctx, k, C.int64_t(delta), &out) != 0 {
		return 0, fmt.Errorf("store add %q failed", key)
	}
	return int64(out), nil
}

func (s cStore) Set(key string, value []byte) error {
	k := C.CString(key)
	defer C.free(unsafe.Pointer(k))
	v := C.CBytes(value)
	defer C.free(v)
	if C.mc_pg_call_set(s.set, s.ctx, k, (*C.char)(v), C.uint64_t(len(value))) != 0 {
		return fmt.Errorf("store set %q failed", key)
	}
	return nil
}

func (s cStore) Get(key string, timeout time.Duration) ([]byte, error) {
	k := C.CString(key)
	defer C.free(unsafe.Pointer(k))
	const capacity = 4096
	buf := C.malloc(capacity)
	defer C.free(buf)
	n := C.mc_pg_call_get(s.get, s.ctx, k, (*C.char)(buf), capacity, C.int64_t(timeout.Milliseconds()))
	if n < 0 || n > capacity {
		return nil, fmt.Errorf("store get %q failed", key)
	}
	return C.GoBytes(buf, C.int(n)), nil
}

// Group flags of mc_pg_group_create.
const (
	groupFlagManual    = 1
	groupFlagExtension = 2
)

//export mc_pg_group_create
func mc_pg_group_create(rank, size, maxSize C.int, groupID *C.mc_cchar, storeCtx unsafe.Pointer, set C.mc_pg_store_set_fn, get C.mc_pg_store_get_fn, add C.mc_pg_store_add_fn, flags C.int32_t, errOut **C.char) (ret C.uint64_t) {
	defer recoverToErr(&ret, 0, errOut)
	if set == nil || get == nil {
		pgFail(fmt.Errorf("%w: store callbacks are NULL", backend.ErrInvalid), errOut)
		return 0
	}
	var store backend.Store = cStore{ctx: storeCtx, set: set, get: get}
	if add != nil {
		store = cAddStore{cStore{ctx: storeCtx, set: set, get: get}, add}
	}
	g, err := pgRuntime.NewGroup(backend.GroupConfig{
		Rank: int(rank), Size: int(size), MaxSize: int(maxSize), GroupID: C.GoString(groupID),
		Store:     store,
		Manual:    flags&groupFlagManual != 0,
		Extension: flags&groupFlagExtension != 0,
	})
	if err != nil {
		pgFail(err, errOut)
		return 0
	}
	return C.uint64_t(pgGroups.put(g))
}

//export mc_pg_group_destroy
func mc_pg_group_destroy(group C.uint64_t) {
	defer recoverVoid()
	if g, ok := pgGroups.take(uint64(group)); ok {
		g.Close()
	}
}

//export mc_pg_group_view
func mc_pg_group_view(group C.uint64_t, active *C.int32_t, n C.int, epoch *C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, pgOther)
	g, err := pgGroup(group)
	if err != nil {
		return failed(C.int(-1), err)
	}
	// The mask is only built when asked for (a caller may want the epoch
	// alone).
	if active != nil && n > 0 {
		mask := g.Mask()
		out := unsafe.Slice(active, int(n))
		for i := range out {
			out[i] = 0
			if i < len(mask) && mask[i] {
				out[i] = 1
			}
		}
	}
	if epoch != nil {
		*epoch = C.uint64_t(g.Epoch())
	}
	return C.int(g.Size())
}

//export mc_pg_inject_link_failure
func mc_pg_inject_link_failure(group C.uint64_t, peer C.int, fail C.int, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	g, err := pgGroup(group)
	if err != nil {
		return pgFail(err, errOut)
	}
	if err := g.InjectLinkFailure(int(peer), fail != 0); err != nil {
		return pgFail(err, errOut)
	}
	return pgOK
}

//export mc_pg_group_slot_bytes
func mc_pg_group_slot_bytes(group C.uint64_t) (ret C.int64_t) {
	defer recoverTo(&ret, -1)
	g, err := pgGroup(group)
	if err != nil {
		return failed(C.int64_t(-1), err)
	}
	return C.int64_t(g.SlotBytes())
}

// Op kinds of mc_pg_op.kind.
const (
	opAllReduce = iota + 1
	opBroadcast
	opAllGather
	opReduceScatter
	opAllToAll
	opReduce
	opGather
	opScatter
	opBarrier
	opSend
	opRecv
)

// opFlagSync (mc_pg_op.flags): the caller waits for the op at once.
const opFlagSync = 1

// inlineOpts are the options of an op with opFlagSync, made once: building
// them per op would allocate on every call.
var inlineOpts = []backend.OpOption{backend.Inline()}

// ints copies n C integers at p (nil: none).
func ints[T C.int32_t | C.uint64_t](p *T, n int) []int {
	if p == nil || n <= 0 {
		return nil
	}
	out := make([]int, n)
	for i, v := range unsafe.Slice(p, n) {
		out[i] = int(v)
	}
	return out
}

//export mc_pg_submit
func mc_pg_submit(group C.uint64_t, op *C.mc_cpg_op, done C.mc_pg_done_fn, ctx unsafe.Pointer, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	g, err := pgGroup(group)
	if err != nil {
		return pgFail(err, errOut)
	}
	if op == nil || done == nil {
		return pgFail(fmt.Errorf("%w: NULL op or callback", backend.ErrInvalid), errOut)
	}
	in, out := cslice[byte](op.in, int(op.in_bytes)), cslice[byte](op.out, int(op.out_bytes))
	dt, rop, root, count := backend.DType(op.dtype), backend.ReduceOp(op.reduce_op), int(op.root), int(op.count)
	var opts []backend.OpOption
	if op.flags&opFlagSync != 0 {
		opts = inlineOpts
	}
	var w *backend.Work
	switch op.kind {
	case opAllReduce:
		w, err = g.AllReduce(out, count, dt, rop, opts...)
	case opBroadcast:
		w, err = g.Broadcast(out, root, opts...)
	case opAllGather:
		w, err = g.AllGather(in, out, opts...)
	case opReduceScatter:
		w, err = g.ReduceScatter(in, out, count, dt, rop, opts...)
	case opAllToAll:
		if op.send_bytes == nil || op.recv_bytes == nil {
			return pgFail(fmt.Errorf("%w: all_to_all without sizes", backend.ErrInvalid), errOut)
		}
		w, err = g.AllToAll(in, out, ints(op.send_bytes, count), ints(op.recv_bytes, count), opts...)
	case opReduce:
		w, err = g.Reduce(out, count, dt, rop, root, opts...)
	case opGather:
		w, err = g.Gather(in, out, root, opts...)
	case opScatter:
		w, err = g.Scatter(in, out, root, opts...)
	case opBarrier:
		w, err = g.Barrier(opts...)
	case opSend:
		w, err = g.Send(in, root, opts...)
	case opRecv:
		w, err = g.Recv(out, root, opts...)
	default:
		err = fmt.Errorf("%w: unknown op kind %d", backend.ErrInvalid, op.kind)
	}
	if err != nil {
		return pgFail(err, errOut)
	}
	if w.Completed() { // run inline: report it without a callback to keep
		reportDone(g, w, w.Err(), done, ctx)
	} else {
		w.OnDone(func(err error) { reportDone(g, w, err, done, ctx) })
	}
	return pgOK
}

// reportDone calls done with w's outcome err, the mask of the ranks that
// failed during it (this rank's own bit when it was left out), the
// group's epoch and the mask of the ranks the op ran over.
func reportDone(g *backend.Group, w *backend.Work, err error, done C.mc_pg_done_fn, ctx unsafe.Pointer) {
	var failed uint64
	for _, r := range w.FailedRanks() {
		if r < 64 {
			failed |= 1 << r
		}
	}
	if w.Lost() && g.Rank() < 64 { // this rank itself was left out
		failed |= 1 << g.Rank()
	}
	epoch, ran := C.uint64_t(g.Epoch()), C.uint64_t(w.Ran())
	if err == nil {
		C.mc_pg_call_done(done, ctx, pgOK, nil, C.uint64_t(failed), epoch, ran)
		return
	}
	msg := C.CString(err.Error())
	defer C.free(unsafe.Pointer(msg))
	C.mc_pg_call_done(done, ctx, pgStatus(err), msg, C.uint64_t(failed), epoch, ran)
}
