package main

// #include "cgo.h"
import "C"

import "unsafe"

// Marshalling of the membership calls (join_group, proposals,
// sync_after_failure, peer state); the logic is package backend.

//export mc_pg_group_set_mirror
func mc_pg_group_set_mirror(group C.uint64_t, mirror *C.int32_t, n C.int, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	g, err := pgGroup(group)
	if err != nil {
		return pgFail(err, errOut)
	}
	g.SetMirror(unsafe.Pointer(mirror), int(n))
	return pgOK
}

//export mc_pg_group_world_size
func mc_pg_group_world_size(group C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, pgOther)
	g, err := pgGroup(group)
	if err != nil {
		return failed(C.int(-1), err)
	}
	return C.int(g.WorldSize())
}

//export mc_pg_join_group
func mc_pg_join_group(group C.uint64_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	g, err := pgGroup(group)
	if err == nil {
		err = g.JoinGroup()
	}
	if err != nil {
		return pgFail(err, errOut)
	}
	return pgOK
}

//export mc_pg_propose
func mc_pg_propose(group C.uint64_t, activate C.int, ranks *C.mc_ci32, n C.int, status *C.int32_t, newEpoch, dropped *C.uint64_t, reason, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	g, err := pgGroup(group)
	if err != nil {
		return pgFail(err, errOut)
	}
	res, err := g.Propose(activate != 0, ints(ranks, int(n)))
	if err != nil {
		return pgFail(err, errOut)
	}
	if status != nil {
		*status = C.int32_t(res.Status)
	}
	if newEpoch != nil {
		*newEpoch = C.uint64_t(res.Epoch)
	}
	if dropped != nil {
		var mask uint64
		for _, r := range res.Dropped {
			mask |= 1 << r
		}
		*dropped = C.uint64_t(mask)
	}
	if reason != nil {
		*reason = nil
		if res.Reason != "" {
			*reason = C.CString(res.Reason)
		}
	}
	return pgOK
}

//export mc_pg_sync_after_failure
func mc_pg_sync_after_failure(group C.uint64_t, status *C.int32_t, reason **C.char, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	g, err := pgGroup(group)
	if err != nil {
		return pgFail(err, errOut)
	}
	res, err := g.SyncAfterFailure()
	if err != nil {
		return pgFail(err, errOut)
	}
	if status != nil {
		*status = C.int32_t(res.Status)
	}
	if reason != nil {
		*reason = nil
		if res.Reason != "" {
			*reason = C.CString(res.Reason)
		}
	}
	return pgOK
}

//export mc_pg_peer_state
func mc_pg_peer_state(group C.uint64_t, ranks *C.mc_ci32, n C.int, out *C.int32_t, errOut **C.char) (ret C.int) {
	defer recoverToErr(&ret, pgOther, errOut)
	g, err := pgGroup(group)
	if err != nil {
		return pgFail(err, errOut)
	}
	st, err := g.PeerState(ints(ranks, int(n)))
	if err != nil {
		return pgFail(err, errOut)
	}
	if out != nil && n > 0 {
		o := unsafe.Slice(out, int(n))
		for i, ok := range st {
			o[i] = 0
			if ok {
				o[i] = 1
			}
		}
	}
	return pgOK
}

//export mc_pg_num_synced_ranks
func mc_pg_num_synced_ranks(group C.uint64_t) (ret C.int) {
	defer recoverTo(&ret, pgOther)
	g, err := pgGroup(group)
	if err != nil {
		return failed(C.int(-1), err)
	}
	return C.int(g.NumSyncedRanks())
}
