package main

// #include "cgo.h"
import "C"

import (
	"encoding/json"
	"fmt"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// The store's tracing and metrics calls (docs/store-operations.md#tracing-and-the-metrics-server).

//export mc_store_init_tracing
func mc_store_init_tracing(settingsJSON *C.mc_cchar, statusOut, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	ts := client.TraceSettingsFromEnv()
	if settingsJSON != nil {
		if err := json.Unmarshal([]byte(C.GoString(settingsJSON)), &ts); err != nil {
			return storeFail(fmt.Errorf("%w: trace settings: %v", kvstore.InvalidParams, err), errOut)
		}
	}
	st, err := client.InitTracing(ts)
	if err != nil {
		return storeFail(err, errOut)
	}
	if statusOut != nil {
		b, _ := json.Marshal(st)
		*statusOut = C.CString(string(b))
	}
	return 0
}

//export mc_store_metrics_text
func mc_store_metrics_text(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	c := storeOf(h)
	if c == nil {
		return failed[*C.char](nil, errNotReady)
	}
	return C.CString(c.MetricsText())
}

//export mc_store_breakdown
func mc_store_breakdown(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	c := storeOf(h)
	if c == nil {
		return failed[*C.char](nil, errNotReady)
	}
	b, _ := json.Marshal(c.Breakdown())
	return C.CString(string(b))
}

//export mc_store_start_metrics_server
func mc_store_start_metrics_server(h C.uint64_t, addr *C.mc_cchar, addrOut, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	c := storeOf(h)
	if c == nil || addrOut == nil {
		return storeFail(errNotReady, errOut)
	}
	got, err := c.StartMetricsServer(C.GoString(addr))
	if err != nil {
		return storeFail(err, errOut)
	}
	*addrOut = C.CString(got)
	return 0
}

//export mc_store_stop_metrics_server
func mc_store_stop_metrics_server(h C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil {
		return refused()
	}
	if !c.StopMetricsServer() {
		return 1
	}
	return 0
}

//export mc_store_metrics_server_address
func mc_store_metrics_server_address(h C.uint64_t) (ret *C.char) {
	defer recoverTo(&ret, nil)
	c := storeOf(h)
	if c == nil {
		return failed[*C.char](nil, errNotReady)
	}
	return C.CString(c.MetricsServerAddress())
}
