package main

// #include "cgo.h"
// #include <string.h>
import "C"

import (
	"errors"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/transfer"
	"github.com/mooncake-go/mooncake/transfer/rpcmsg"
)

// This file exports the message facility of mooncake.engine's
// RpcInterface (transfer/rpcmsg).

var (
	rpcServers handleTable[*rpcmsg.Server]
	rpcClients handleTable[*rpcmsg.Client]
)

//export mc_rpc_server_start
func mc_rpc_server_start(listenAddress *C.mc_cchar, queueLen C.int, maxMessage C.uint64_t, addrOut, errOut **C.char) (ret C.uint64_t) {
	defer recoverToErr(&ret, 0, errOut)
	cfg, err := tlsconf.FromEnv().Server()
	if err != nil {
		return failedOut(C.uint64_t(0), err, errOut)
	}
	s, err := rpcmsg.ListenConfig(C.GoString(listenAddress), rpcmsg.Config{QueueLen: int(queueLen), MaxMessage: uint64(maxMessage), TLS: cfg})
	if err != nil {
		return failedOut(C.uint64_t(0), err, errOut)
	}
	if addrOut != nil {
		*addrOut = C.CString(s.Addr())
	}
	return C.uint64_t(rpcServers.put(s))
}

//export mc_rpc_server_next
func mc_rpc_server_next(h C.uint64_t, timeoutMs C.int, kind *C.int, source **C.char, data *unsafe.Pointer, length *C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	s, ok := rpcServers.get(uint64(h))
	if !ok || kind == nil || source == nil || data == nil || length == nil {
		return failed(C.int(-1), errors.New("rpc server: unknown handle or a NULL output argument"))
	}
	m, got, err := s.Next(time.Duration(timeoutMs) * time.Millisecond)
	switch {
	case errors.Is(err, rpcmsg.ErrClosed):
		return failed(C.int(-1), err)
	case !got:
		return 0
	}
	p := C.malloc(C.size_t(max(len(m.Data), 1)))
	if len(m.Data) > 0 {
		C.memcpy(p, unsafe.Pointer(&m.Data[0]), C.size_t(len(m.Data)))
	}
	*kind, *source, *data, *length = C.int(m.Kind), C.CString(m.Source), p, C.uint64_t(len(m.Data))
	return 1
}

//export mc_rpc_server_stop
func mc_rpc_server_stop(h C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	if s, ok := rpcServers.take(uint64(h)); ok {
		s.Close()
	}
	return 0
}

//export mc_rpc_server_metrics_text
func mc_rpc_server_metrics_text(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	s, ok := rpcServers.get(uint64(h))
	if !ok {
		return failed[*C.char](nil, errors.New("rpc server: unknown handle"))
	}
	return C.CString(s.MetricsText())
}

//export mc_rpc_client_create
func mc_rpc_client_create(poolSize, timeoutMs C.int) (ret C.uint64_t) {
	defer recoverTo(&ret, 0)
	cfg, err := tlsconf.FromEnv().Client()
	if err != nil {
		return failed(C.uint64_t(0), err)
	}
	return C.uint64_t(rpcClients.put(rpcmsg.NewClientTLS(int(poolSize), time.Duration(timeoutMs)*time.Millisecond, cfg)))
}

//export mc_rpc_client_send
func mc_rpc_client_send(h C.uint64_t, target *C.mc_cchar, kind C.int, data *C.mc_cvoid, length C.uint64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	c, ok := rpcClients.get(uint64(h))
	if !ok || kind < 0 || kind > 255 || (data == nil && length > 0) {
		return failedOut(C.int(transfer.CodeInvalidArgument), errors.New("rpc client: bad handle or arguments"), errOut)
	}
	payload := cslice[byte](unsafe.Pointer(data), int(length))
	if err := c.Send(C.GoString(target), byte(kind), payload); err != nil {
		return failedOut(C.int(transfer.CodeOf(err)), err, errOut)
	}
	return 0
}

//export mc_rpc_client_close
func mc_rpc_client_close(h C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	if c, ok := rpcClients.take(uint64(h)); ok {
		c.Close()
	}
	return 0
}
