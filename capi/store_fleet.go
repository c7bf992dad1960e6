package main

// #include "cgo.h"
import "C"

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// The Store-RS fleet calls: setup options, segment lifecycle, handoff
// plans (docs/store-operations.md).

//export mc_store_set_fleet_options
func mc_store_set_fleet_options(h C.uint64_t, optionsJSON *C.mc_cchar, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	s, ok := stores.get(uint64(h))
	if !ok {
		return storeFail(errNotReady, errOut)
	}
	var f client.FleetConfig
	if err := json.Unmarshal([]byte(C.GoString(optionsJSON)), &f); err != nil {
		return storeFail(fmt.Errorf("%w: fleet options: %v", kvstore.InvalidParams, err), errOut)
	}
	if err := f.Validate(); err != nil {
		return storeFail(err, errOut)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil || s.d != nil {
		return storeFail(fmt.Errorf("%w: fleet options must be set before setup", kvstore.InvalidParams), errOut)
	}
	s.fleet = f
	return 0
}

//export mc_store_segment_ids
func mc_store_segment_ids(h C.uint64_t, idsOut **C.char) (ret C.int) {
	defer recoverTo(&ret, -1)
	c := storeOf(h)
	if c == nil || idsOut == nil {
		return refused()
	}
	*idsOut = joinIDs(c.SegmentIDs())
	return 0
}

//export mc_store_set_segment_mode
func mc_store_set_segment_mode(h C.uint64_t, ids **C.mc_cchar, n, mode C.int, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	c := storeOf(h)
	if c == nil {
		return storeFail(errNotReady, errOut)
	}
	if _, known := pb.SegmentMode_name[int32(mode)]; !known {
		return storeFail(fmt.Errorf("%w: segment mode %d", kvstore.InvalidParams, mode), errOut)
	}
	if err := c.SetSegmentMode(goStrings(ids, n), pb.SegmentMode(mode)); err != nil {
		return storeFail(err, errOut)
	}
	return 0
}

// Evacuation operations of mc_store_evacuate.
const (
	evacuateOnly   = 0 // Evacuate
	evacuateDrain  = 1 // Drain
	evacuateRetire = 2 // Retire (one segment)
)

//export mc_store_evacuate
func mc_store_evacuate(h C.uint64_t, op C.int, ids **C.mc_cchar, n C.int, timeoutMs C.int64_t, reportOut, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	c := storeOf(h)
	if c == nil || reportOut == nil {
		return storeFail(errNotReady, errOut)
	}
	if timeoutMs <= 0 {
		return storeFail(fmt.Errorf("%w: timeout must be positive", kvstore.InvalidParams), errOut)
	}
	list, timeout := goStrings(ids, n), time.Duration(timeoutMs)*time.Millisecond
	var rep client.EvacuationReport
	var err error
	switch op {
	case evacuateOnly:
		rep, err = c.Evacuate(list, timeout)
	case evacuateDrain:
		rep, err = c.Drain(list, timeout)
	case evacuateRetire:
		if len(list) != 1 {
			return storeFail(fmt.Errorf("%w: retire takes one segment id", kvstore.InvalidParams), errOut)
		}
		rep, err = c.Retire(list[0], timeout)
	default:
		return storeFail(fmt.Errorf("%w: evacuation operation %d", kvstore.InvalidParams, op), errOut)
	}
	if err != nil {
		return storeFail(err, errOut)
	}
	b, _ := json.Marshal(rep)
	*reportOut = C.CString(string(b))
	return 0
}

// handoffPlan is the JSON form of a handoff plan.
type handoffPlan struct {
	Items       []handoffItem `json:"items"`
	Objects     uint32        `json:"objects"`
	Bytes       uint64        `json:"bytes"`
	Unplaceable uint32        `json:"unplaceable"`
}

type handoffItem struct {
	Key           string `json:"key"`
	Size          uint64 `json:"size"`
	FromSegment   string `json:"from_segment"`
	ToSegment     string `json:"to_segment"`
	ToOwner       string `json:"to_owner"`
	OtherReplicas uint32 `json:"other_replicas"`
}

//export mc_store_plan_handoff
func mc_store_plan_handoff(h C.uint64_t, ids **C.mc_cchar, n C.int, planOut, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, -1, errOut)
	c := storeOf(h)
	if c == nil || planOut == nil {
		return storeFail(errNotReady, errOut)
	}
	resp, err := c.PlanHandoff(goStrings(ids, n))
	if err != nil {
		return storeFail(err, errOut)
	}
	plan := handoffPlan{Items: []handoffItem{}, Objects: resp.GetObjects(), Bytes: resp.GetBytes(), Unplaceable: resp.GetUnplaceable()}
	for _, it := range resp.GetItems() {
		plan.Items = append(plan.Items, handoffItem{it.GetKey(), it.GetSize(), it.GetFromSegment(), it.GetToSegment(), it.GetToOwner(), it.GetOtherReplicas()})
	}
	b, _ := json.Marshal(plan)
	*planOut = C.CString(string(b))
	return 0
}
