package main

// #include "cgo.h"
import "C"

import (
	"encoding/json"
	"errors"
	"unsafe"

	"github.com/mooncake-go/mooncake/ep"
	"github.com/mooncake-go/mooncake/transfer"
)

// MoE dispatch/combine (package ep) for mooncake.mooncake_ep_buffer.

var (
	epBuffers handleTable[*ep.Buffer]
	epOps     handleTable[*epOp]
)

// epOp is a call whose receive is pending: run by mc_ep_op_wait (hook mode),
// or already running on its own goroutine (async mode).
type epOp struct {
	op    *ep.Op
	async bool
}

const (
	epModeSync  = 0
	epModeHook  = 1
	epModeAsync = 2
)

var errNoBuffer = errors.New("ep: unknown buffer handle")

// epFail reports a failed EP call (mooncake.h, "Errors"): -202 when the
// buffer closed, the Transfer Engine's number of a transfer error, else -1
// (invalid argument: ep's own checks).
func epFail(err error, errOut **C.char) C.int {
	code := C.int(transfer.CodeInvalidArgument)
	var te *transfer.Error
	switch {
	case errors.Is(err, ep.ErrClosed):
		code = C.int(transfer.CodeContext)
	case errors.As(err, &te):
		code = C.int(transfer.CodeOf(err))
	}
	return failedOut(code, err, errOut)
}

//export mc_ep_size_hint
func mc_ep_size_hint(n, h, ranks, e C.int64_t) (ret C.int64_t) {
	defer recoverTo(&ret, -1)
	return C.int64_t(ep.SizeHint(int(n), int(h), int(ranks), int(e)))
}

//export mc_ep_buffer_create
func mc_ep_buffer_create(rank, ranks C.int, nbytes C.int64_t, localHostname *C.mc_cchar, disableP2P C.int, errOut **C.char) (ret C.uint64_t) {
	defer recoverToErr(&ret, 0, errOut)
	b, err := ep.NewBuffer(ep.Config{Rank: int(rank), Ranks: int(ranks), Bytes: int64(nbytes),
		LocalHostname: C.GoString(localHostname), DisableP2P: disableP2P != 0})
	if err != nil {
		epFail(err, errOut)
		return 0
	}
	return C.uint64_t(epBuffers.put(b))
}

//export mc_ep_buffer_self
func mc_ep_buffer_self(buf C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	b, ok := epBuffers.get(uint64(buf))
	if !ok {
		return failed[*C.char](nil, errNoBuffer)
	}
	j, _ := json.Marshal(b.Self())
	return C.CString(string(j))
}

//export mc_ep_buffer_connect
func mc_ep_buffer_connect(buf C.uint64_t, peersJSON *C.mc_cchar, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	b, ok := epBuffers.get(uint64(buf))
	if !ok {
		return epFail(errNoBuffer, errOut)
	}
	var peers []ep.Peer
	if err := json.Unmarshal([]byte(C.GoString(peersJSON)), &peers); err != nil {
		return epFail(err, errOut)
	}
	if err := b.Connect(peers); err != nil {
		return epFail(err, errOut)
	}
	return 0
}

//export mc_ep_buffer_destroy
func mc_ep_buffer_destroy(buf C.uint64_t) {
	defer recoverVoid()
	if b, ok := epBuffers.take(uint64(buf)); ok {
		b.Close()
	}
}

// epFinish runs or hands off the receive of op according to mode.
func epFinish(op *ep.Op, mode C.int32_t, opOut *C.uint64_t, errOut **C.char) C.int {
	switch mode {
	case epModeHook:
		*opOut = C.uint64_t(epOps.put(&epOp{op: op}))
	case epModeAsync:
		op.RecvAsync()
		*opOut = C.uint64_t(epOps.put(&epOp{op: op, async: true}))
	default:
		if err := op.Recv(); err != nil {
			return epFail(err, errOut)
		}
	}
	return 0
}

// epCall is a dispatch's or combine's mc_ep_call, checked and sized.
type epCall struct {
	b             *ep.Buffer
	mode          C.int32_t
	T, K, N, H, E int
	L, RN, R      int // experts per rank, rows per expert, ranks (1 if the shape is invalid)
	active        []int32
}

// epBegin checks the handle, op_out and the common part of a call. With an
// invalid shape R is 1: ep's checks word that error, and the slice sizes
// the caller computes need E/R.
func epBegin(buf C.uint64_t, c *C.mc_ep_call, opOut *C.uint64_t) (*epCall, error) {
	b, ok := epBuffers.get(uint64(buf))
	if !ok {
		return nil, errNoBuffer
	}
	if (c.mode == epModeHook || c.mode == epModeAsync) && opOut == nil {
		return nil, errors.New("ep: op_out is NULL")
	}
	x := &epCall{b: b, mode: c.mode, T: int(c.num_tokens), K: int(c.top_k), N: int(c.max_tokens),
		H: int(c.hidden), E: int(c.num_experts), R: b.Ranks(),
		active: cslice[int32](unsafe.Pointer(c.active), b.Ranks())}
	if x.R <= 0 || x.E%x.R != 0 || x.N <= 0 || x.H <= 0 {
		x.R = 1
	}
	x.L, x.RN = x.E/x.R, x.R*x.N
	return x, nil
}

// epRun is the frame of a dispatch or combine: check the handle, op_out
// and the common part (call, the first member of both argument structs, so
// NULL args arrive as a NULL call), send, then receive or hand off the
// receive as the mode says.
func epRun(buf C.uint64_t, call *C.mc_ep_call, opOut *C.uint64_t, errOut **C.char, send func(c *epCall) (*ep.Op, error)) C.int {
	if call == nil {
		return epFail(errors.New("ep: args is NULL"), errOut)
	}
	c, err := epBegin(buf, call, opOut)
	if err != nil {
		return epFail(err, errOut)
	}
	op, err := send(c)
	if err != nil {
		return epFail(err, errOut)
	}
	return epFinish(op, c.mode, opOut, errOut)
}

//export mc_ep_dispatch
func mc_ep_dispatch(buf C.uint64_t, args *C.mc_cep_dispatch_args, opOut *C.uint64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	return epRun(buf, (*C.mc_ep_call)(unsafe.Pointer(args)), opOut, errOut, func(c *epCall) (*ep.Op, error) {
		elem := 2
		if args.fp8 != 0 {
			elem = 1
		}
		a := &ep.DispatchArgs{
			X: cslice[uint16](args.x, c.T*c.H), TopkIdx: cslice[int64](unsafe.Pointer(args.topk_idx), c.T*c.K),
			T: c.T, K: c.K, N: c.N, H: c.H, E: c.E, Active: c.active, TimeoutUs: int64(args.call.timeout_us), FP8: args.fp8 != 0,
			RecvX: cslice[byte](args.recv_x, c.L*c.RN*c.H*elem), RecvCount: cslice[int32](unsafe.Pointer(args.recv_count), c.L),
			SrcInfo: cslice[int32](unsafe.Pointer(args.src_info), c.L*c.RN), LayoutRange: cslice[int64](unsafe.Pointer(args.layout_range), c.L*c.R),
		}
		if a.FP8 {
			a.RecvScales = cslice[float32](unsafe.Pointer(args.recv_scales), c.L*c.RN*(c.H/ep.ChannelsPerScale))
		}
		return c.b.DispatchSend(a)
	})
}

//export mc_ep_combine
func mc_ep_combine(buf C.uint64_t, args *C.mc_cep_combine_args, opOut *C.uint64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	return epRun(buf, (*C.mc_ep_call)(unsafe.Pointer(args)), opOut, errOut, func(c *epCall) (*ep.Op, error) {
		return c.b.CombineSend(&ep.CombineArgs{
			X: cslice[uint16](args.x, c.L*c.RN*c.H), TopkIdx: cslice[int64](unsafe.Pointer(args.topk_idx), c.T*c.K),
			Weights: cslice[float32](unsafe.Pointer(args.topk_weights), c.T*c.K),
			T:       c.T, K: c.K, N: c.N, H: c.H, E: c.E, Active: c.active, TimeoutUs: int64(args.call.timeout_us),
			SrcInfo: cslice[int32](unsafe.Pointer(args.src_info), c.L*c.RN), LayoutRange: cslice[int64](unsafe.Pointer(args.layout_range), c.L*c.R),
			Out: cslice[uint16](args.out, c.T*c.H),
		})
	})
}

//export mc_ep_op_wait
func mc_ep_op_wait(op C.uint64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	o, ok := epOps.get(uint64(op))
	if !ok {
		return epFail(errors.New("ep: unknown or already completed operation"), errOut)
	}
	var err error
	if o.async {
		err = o.op.Wait()
	} else if err = o.op.Recv(); err != nil && !o.op.Done() {
		return epFail(err, errOut) // e.g. hooks out of order: the op stays pending
	}
	epOps.take(uint64(op))
	if err != nil {
		return epFail(err, errOut) // canceled by the buffer's destroy
	}
	return 0
}

//export mc_ep_op_done
func mc_ep_op_done(op C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	o, ok := epOps.get(uint64(op))
	if !ok {
		return 1
	}
	if o.async && o.op.Done() {
		return 1
	}
	return 0
}
