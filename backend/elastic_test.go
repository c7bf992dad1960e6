package backend

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// elasticRanks drives in-process elastic membership: each rank has its own
// Runtime (engine), all share one MemStore; rank 0's runtime serves the
// coordinator.
type elasticRanks struct {
	t     *testing.T
	store *MemStore
	rts   []*Runtime
	gs    []*Group
}

// found starts founders 0..size-1 of a group of slots slots.
func found(t *testing.T, size, slots int, manual bool) *elasticRanks {
	t.Helper()
	e := &elasticRanks{t: t, store: NewMemStore()}
	e.rts, e.gs = startRanks(t, size, shortTimeoutRuntime, GroupConfig{MaxSize: slots, GroupID: "elastic",
		Store: e.store, Manual: manual, CollSlot: 4096, P2PSlot: 4096})
	t.Cleanup(func() {
		for r := len(e.gs) - 1; r >= 0; r-- { // rank 0 (the coordinator) last
			e.kill(r)
		}
	})
	return e
}

// kill closes rank r's group and runtime, as if its process died.
func (e *elasticRanks) kill(r int) {
	if e.gs[r] != nil {
		e.gs[r].Close()
		e.gs[r] = nil
	}
	if e.rts[r] != nil {
		e.rts[r].Close()
		e.rts[r] = nil
	}
}

// extend starts a new process for slot r (an extension or replacement).
func (e *elasticRanks) extend(r, size, slots int) *Group {
	e.t.Helper()
	e.rts[r] = shortTimeoutRuntime()
	g, err := e.rts[r].NewGroup(GroupConfig{Rank: r, Size: size, MaxSize: slots, GroupID: "elastic", Store: e.store,
		Extension: true, CollSlot: 4096, P2PSlot: 4096})
	if err != nil {
		e.t.Fatalf("extension as rank %d: %v", r, err)
	}
	e.gs[r] = g
	return g
}

// each runs fn on every live rank at once and waits (60 s at most).
func (e *elasticRanks) each(fn func(t *testing.T, r int, g *Group)) {
	e.t.Helper()
	runAll(e.t, e.gs, 60*time.Second, fn)
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func mask(g *Group) string {
	v := g.View()
	b := make([]byte, len(v.Active))
	for i, a := range v.Active {
		b[i] = '0'
		if a {
			b[i] = '1'
		}
	}
	return string(b)
}

// allReduceRanks: every rank contributes rank+1; want is the expected sum.
func allReduceRanks(t *testing.T, r int, g *Group, want float32) *Work {
	t.Helper()
	buf := f32bytes(float32(r+1), float32(10*(r+1)))
	w, err := g.AllReduce(buf, 2, Float32, Sum)
	if err != nil {
		t.Errorf("rank %d: all_reduce: %v", r, err)
		return nil
	}
	if _, err := w.Wait(0); err != nil {
		t.Errorf("rank %d: all_reduce: %v", r, err)
	}
	if !bytes.Equal(buf, f32bytes(want, 10*want)) {
		t.Errorf("rank %d: all_reduce = %v, want %v", r, buf, f32bytes(want, 10*want))
	}
	return w
}

// activate: the joiner (rank j) runs JoinGroup while rank 0 waits for its
// peer state and activates it; everyone then sees the full mask.
func (e *elasticRanks) activate(j int, want string) {
	e.t.Helper()
	e.each(func(t *testing.T, r int, g *Group) {
		switch r {
		case j:
			if err := g.JoinGroup(); err != nil {
				t.Errorf("rank %d: join_group: %v", r, err)
			}
		case 0:
			waitFor(t, "peer state", func() bool { ok, _ := g.PeerState([]int{j}); return ok[0] })
			res, err := g.Propose(true, []int{j})
			if err != nil || res.Status != ProposalApplied {
				t.Errorf("activate %d: %+v, %v", j, res, err)
			}
		}
		waitFor(t, "mask "+want, func() bool { return mask(g) == want })
	})
}

// mirrorOf gives g a mirror (as the torch plugin's active_ranks tensor)
// and returns a reader of it.
func mirrorOf(g *Group) func() string {
	m := make([]int32, len(g.View().Active)+1) // one more: never written
	m[len(m)-1] = 7
	g.SetMirror(unsafe.Pointer(&m[0]), len(m)-1)
	return func() string {
		var b strings.Builder
		for i := range m {
			fmt.Fprint(&b, atomic.LoadInt32(&m[i]))
		}
		return b.String()
	}
}

func TestReplacementJoinsAndFullGroupComputes(t *testing.T) {
	e := found(t, 4, 4, false)
	mirror0 := mirrorOf(e.gs[0])
	if got := mirror0(); got != "11117" {
		t.Errorf("rank 0's mirror at the start: %s", got)
	}
	e.kill(2)
	e.each(func(t *testing.T, r int, g *Group) {
		w := allReduceRanks(t, r, g, 1+2+4)
		if w != nil && (w.LocalSuccess() || fmt.Sprint(w.FailedRanks()) != "[2]") && !(w.LocalSuccess() && mask(g) == "1101") {
			t.Errorf("rank %d: failed %v success %v", r, w.FailedRanks(), w.LocalSuccess())
		}
		if mask(g) != "1101" {
			t.Errorf("rank %d: mask %s", r, mask(g))
		}
	})
	if got := mirror0(); got != "11017" {
		t.Errorf("rank 0's mirror after the death: %s", got)
	}
	g2 := e.extend(2, 4, 4)
	if g2.WorldSize() != 4 || mask(g2) != "1101" {
		t.Fatalf("replacement: world size %d, mask %s", g2.WorldSize(), mask(g2))
	}
	mirror2 := mirrorOf(g2)
	if got := mirror2(); got != "00107" {
		t.Errorf("isolated replacement's mirror: %s", got)
	}
	allReduceRanks(t, 2, g2, 3) // isolated: over itself
	if ok, _ := g2.PeerState([]int{0, 1, 2, 3}); fmt.Sprint(ok) != "[true true false true]" {
		t.Errorf("replacement's peer state before join_group: %v", ok)
	}
	e.activate(2, "1111")
	if got, got2 := mirror0(), mirror2(); got != "11117" || got2 != "11117" {
		t.Errorf("mirrors after the activation: rank 0 %s, rank 2 %s", got, got2)
	}
	e.each(func(t *testing.T, r int, g *Group) {
		if w := allReduceRanks(t, r, g, 10); w != nil && !w.LocalSuccess() {
			t.Errorf("rank %d: full all_reduce not a local success", r)
		}
		if n := g.NumSyncedRanks(); n != 4 {
			t.Errorf("rank %d: synced ranks %d", r, n)
		}
		in := f32bytes(float32(r))
		out := make([]byte, 16)
		w, err := g.AllGather(in, out)
		must(t, g, "all_gather", w, err)
		if !bytes.Equal(out, f32bytes(0, 1, 2, 3)) {
			t.Errorf("rank %d: all_gather %v", r, out)
		}
		// Point-to-point between the replacement and a survivor.
		switch r {
		case 2:
			w, err := g.Send(f32bytes(42), 0)
			must(t, g, "send", w, err)
		case 0:
			buf := make([]byte, 4)
			w, err := g.Recv(buf, 2)
			must(t, g, "recv", w, err)
			if !bytes.Equal(buf, f32bytes(42)) {
				t.Errorf("recv from the replacement: %v", buf)
			}
		}
	})
}

func TestExtensionFromThreeFounders(t *testing.T) {
	e := found(t, 3, 4, false)
	e.each(func(t *testing.T, r int, g *Group) {
		if g.WorldSize() != 3 || mask(g) != "1110" {
			t.Errorf("rank %d: world size %d, mask %s", r, g.WorldSize(), mask(g))
		}
		allReduceRanks(t, r, g, 6)
	})
	g3 := e.extend(3, 4, 4)
	if g3.WorldSize() != 4 || fmt.Sprint(g3.Mask()) != "[false false false true]" {
		t.Errorf("joiner's world size %d (want its declared 4), mask %v (want itself)", g3.WorldSize(), g3.Mask())
	}
	if _, err := g3.AllReduce(make([]byte, 4), 1, Float32, Sum); err != nil {
		t.Errorf("isolated all_reduce: %v", err)
	}
	e.activate(3, "1111")
	e.each(func(t *testing.T, r int, g *Group) {
		if g.WorldSize() != 4 {
			t.Errorf("rank %d: world size %d", r, g.WorldSize())
		}
		allReduceRanks(t, r, g, 10)
	})
	// A second extension of a taken slot waits for it, then gives up.
	if _, err := e.rts[3].NewGroup(GroupConfig{Rank: 9, Size: 4, MaxSize: 4, GroupID: "elastic", Store: e.store, Extension: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("rank 9 of 4 slots: %v", err)
	}
}

func TestGracefulLeaveAndReplacement(t *testing.T) {
	e := found(t, 4, 4, false)
	res, err := e.gs[3].Propose(false, []int{3})
	if err != nil || res.Status != ProposalApplied {
		t.Fatalf("deactivate self: %+v, %v", res, err)
	}
	e.kill(3)
	e.each(func(t *testing.T, r int, g *Group) {
		waitFor(t, "mask 1110", func() bool { return mask(g) == "1110" })
		if g.WorldSize() != 3 {
			t.Errorf("rank %d: world size %d", r, g.WorldSize())
		}
		if w := allReduceRanks(t, r, g, 6); w != nil && !w.LocalSuccess() {
			t.Errorf("rank %d: all_reduce after a graceful leave is not a local success", r)
		}
	})
	e.extend(3, 4, 4)
	e.activate(3, "1111")
	e.each(func(t *testing.T, r int, g *Group) { allReduceRanks(t, r, g, 10) })
}

// TestManualModeDeactivate: in manual mode the op that meets a death
// completes on every survivor with one outcome — the same result, the
// same failed ranks, local success false — whether the survivor met the
// failure itself or took part in its reconciliation from its idle queue
// before it reached the op.
func TestManualModeDeactivate(t *testing.T) {
	e := found(t, 4, 4, true)
	e.kill(2)
	var outcomes [4]string
	e.each(func(t *testing.T, r int, g *Group) {
		w := allReduceRanks(t, r, g, 7)
		if w != nil {
			outcomes[r] = fmt.Sprintf("success %v failed %v", w.LocalSuccess(), w.FailedRanks())
		}
		if w != nil && (w.LocalSuccess() || fmt.Sprint(w.FailedRanks()) != "[2]") {
			t.Errorf("rank %d: failed %v success %v", r, w.FailedRanks(), w.LocalSuccess())
		}
		if mask(g) != "1111" {
			t.Errorf("rank %d: manual mode changed the mask: %s", r, mask(g))
		}
		res, err := g.SyncAfterFailure()
		if err != nil || res.Status != AfterFailureReconciled {
			t.Errorf("rank %d: sync_after_failure: %+v, %v", r, res, err)
		}
		if res, _ := g.SyncAfterFailure(); res.Status != AfterFailureNoPending {
			t.Errorf("rank %d: second sync_after_failure: %+v", r, res)
		}
		if ok, _ := g.PeerState([]int{2}); ok[0] {
			t.Errorf("rank %d: the dead rank looks healthy", r)
		}
	})
	// allReduceRanks checked each survivor's data (the sum over 0, 1, 3).
	for _, r := range []int{1, 3} {
		if outcomes[r] != outcomes[0] {
			t.Errorf("the survivors disagree on the op's outcome: rank 0 %q, rank %d %q", outcomes[0], r, outcomes[r])
		}
	}
	res, err := e.gs[0].Propose(false, []int{2})
	if err != nil || res.Status != ProposalApplied {
		t.Fatalf("deactivate 2: %+v, %v", res, err)
	}
	e.each(func(t *testing.T, r int, g *Group) {
		waitFor(t, "mask 1101", func() bool { return mask(g) == "1101" })
		if w := allReduceRanks(t, r, g, 7); w != nil && !w.LocalSuccess() {
			t.Errorf("rank %d: all_reduce after deactivation is not a local success", r)
		}
	})
}

func TestInPlaceRejoinAfterLinkFailure(t *testing.T) {
	t.Setenv("MC_TE_FAULT_INJECTION", "1")
	e := found(t, 4, 4, false)
	if err := e.gs[0].InjectLinkFailure(2, true); err != nil {
		t.Fatal(err)
	}
	// Rank 2 is left out alive: its op completes without it (it was lost
	// during the op), or fails because it started after the others had
	// reconciled it away.
	e.each(func(t *testing.T, r int, g *Group) {
		if r == 2 {
			w, err := g.AllReduce(make([]byte, 8), 2, Float32, Sum)
			if err == nil {
				_, err = w.Wait(0)
			}
			if err != nil && !errors.Is(err, ErrInactive) {
				t.Errorf("left-out rank's all_reduce: %v", err)
			}
		} else if w := allReduceRanks(t, r, g, 7); w != nil && !w.LocalSuccess() && fmt.Sprint(w.FailedRanks()) != "[2]" {
			t.Errorf("rank %d: failed %v", r, w.FailedRanks())
		}
		waitFor(t, "mask 1101", func() bool { return mask(g) == "1101" })
	})
	w, err := e.gs[2].AllReduce(make([]byte, 4), 1, Float32, Sum)
	if err == nil {
		_, err = w.Wait(0)
	}
	if !errors.Is(err, ErrInactive) {
		t.Errorf("left-out rank's collective: %v, want ErrInactive", err)
	}
	if err := e.gs[0].InjectLinkFailure(2, false); err != nil {
		t.Fatal(err)
	}
	e.activate(2, "1111")
	e.each(func(t *testing.T, r int, g *Group) {
		allReduceRanks(t, r, g, 10)
		switch r {
		case 0:
			w, err := g.Send(f32bytes(7), 2)
			must(t, g, "send to the rejoined rank", w, err)
		case 2:
			buf := make([]byte, 4)
			w, err := g.Recv(buf, 0)
			must(t, g, "recv on the rejoined rank", w, err)
			if !bytes.Equal(buf, f32bytes(7)) {
				t.Errorf("recv after rejoin: %v", buf)
			}
		}
	})
}

// TestManualDeadRankGoesOfflineWithoutAnOp: in manual mode a rank that
// dies between ops goes offline (unhealthy) but stays in the mask until
// the application deactivates it, and the proposal does not wait for it.
func TestManualDeadRankGoesOfflineWithoutAnOp(t *testing.T) {
	e := found(t, 4, 4, true)
	coord := e.rts[0].coord
	waitFor(t, "rank 3's watch", func() bool { // a process watches within moments of its init
		coord.mu.Lock()
		defer coord.mu.Unlock()
		return coord.groups["elastic"].watching[3] > 0
	})
	e.rts[3].Close() // the process dies: its connections break, nobody waits for it
	e.rts[3] = nil
	g0 := e.gs[0]
	waitFor(t, "rank 3 offline", func() bool { ok, _ := g0.PeerState([]int{3}); return !ok[0] })
	if mask(g0) != "1111" {
		t.Errorf("going offline changed the mask in manual mode: %s", mask(g0))
	}
	start := time.Now()
	res, err := g0.Propose(false, []int{3})
	if err != nil || res.Status != ProposalApplied {
		t.Fatalf("deactivate 3: %+v, %v", res, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the proposal waited %v for the offline rank", d)
	}
	gs := e.gs
	e.gs = gs[:3]
	e.each(func(t *testing.T, r int, g *Group) {
		waitFor(t, "mask 1110", func() bool { return mask(g) == "1110" })
		if w := allReduceRanks(t, r, g, 6); w != nil && !w.LocalSuccess() {
			t.Errorf("rank %d: all_reduce after deactivation is not a local success", r)
		}
	})
	e.gs = gs
}

// TestManualModeIdleRanksRunTheSameOp: in manual mode a failure met by one
// rank while the others are idle is reconciled with all of them; the idle
// ranks' next collective then leaves the dead rank out just like the
// failed op's re-run (the same participants everywhere), and completes
// with the same outcome (the dead rank marked, no local success).
func TestManualModeIdleRanksRunTheSameOp(t *testing.T) {
	e := found(t, 4, 4, true)
	e.kill(2)
	w0, err := e.gs[0].Barrier() // alone: it meets the death first
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rank 0's barrier to reconcile", func() bool {
		for _, r := range []int{1, 3} { // the idle ranks took part from their queues
			if e.gs[r].View().Epoch == 0 {
				return false
			}
		}
		return true
	})
	e.each(func(t *testing.T, r int, g *Group) {
		w := w0
		if r != 0 {
			var err error
			if w, err = g.Barrier(); err != nil {
				t.Errorf("rank %d: barrier: %v", r, err)
				return
			}
		}
		if _, err := w.Wait(0); err != nil {
			t.Errorf("rank %d: barrier: %v", r, err)
		}
		if got := fmt.Sprint(w.FailedRanks()); got != "[2]" || w.LocalSuccess() {
			t.Errorf("rank %d: barrier failed ranks %s success %v, want [2] false", r, got, w.LocalSuccess())
		}
		// The next op meets the dead rank again (a rank that starts it only
		// after the others reconciled runs it without it from the start,
		// and reports the same outcome).
		if w = allReduceRanks(t, r, g, 7); w != nil {
			if f := fmt.Sprint(w.FailedRanks()); f != "[2]" || w.LocalSuccess() {
				t.Errorf("rank %d: all_reduce failed ranks %s success %v, want [2] false", r, f, w.LocalSuccess())
			}
		}
		if mask(g) != "1111" {
			t.Errorf("rank %d: manual mode changed the mask: %s", r, mask(g))
		}
	})
}

// tensorOps runs all_gather and reduce_scatter sized for the world size
// ws (as torch's all_gather_into_tensor and reduce_scatter_tensor are) and
// checks them over the active ranks.
func tensorOps(t *testing.T, r int, g *Group, ws int, active []int) {
	t.Helper()
	const n = 3000 // elements per block: a few 4 KiB slots
	out := filled(-1, ws*n)
	w, err := g.AllGather(filled(float32(r), n), out)
	must(t, g, "all_gather", w, err)
	for p := range ws {
		want := float32(-1)
		if slices.Contains(active, p) {
			want = float32(p)
		}
		if !bytes.Equal(out[p*4*n:(p+1)*4*n], filled(want, n)) {
			t.Errorf("rank %d: all_gather block %d (world %d, active %v) wrong", r, p, ws, active)
		}
	}
	in := make([]byte, 0, ws*4*n)
	for p := range ws {
		in = append(in, filled(float32((r+1)*(p+1)), n)...)
	}
	res := make([]byte, 4*n)
	w, err = g.ReduceScatter(in, res, n, Float32, Sum)
	must(t, g, "reduce_scatter", w, err)
	sum := 0
	for _, a := range active {
		sum += (a + 1) * (r + 1)
	}
	if !bytes.Equal(res, filled(float32(sum), n)) {
		t.Errorf("rank %d: reduce_scatter (world %d, active %v) wrong", r, ws, active)
	}
}

// The recovery cycle of the tensor ops: 4 ranks run them; rank 3 dies;
// the survivors meet the death, run them sized for 3; a replacement joins
// slot 3, every survivor recovers it, and the four run them again.
func TestRecoveryCycleTensorOps(t *testing.T) {
	e := found(t, 4, 4, false)
	e.each(func(t *testing.T, r int, g *Group) { tensorOps(t, r, g, 4, []int{0, 1, 2, 3}) })
	e.kill(3)
	e.each(func(t *testing.T, r int, g *Group) {
		out := filled(-1, 4)
		w, err := g.AllGather(f32bytes(float32(r)), out)
		must(t, g, "all_gather past the death", w, err)
		if mask(g) != "1110" || g.WorldSize() != 3 {
			t.Errorf("rank %d: mask %s, world size %d", r, mask(g), g.WorldSize())
		}
		tensorOps(t, r, g, 3, []int{0, 1, 2})
	})
	e.extend(3, 4, 4)
	e.each(func(t *testing.T, r int, g *Group) {
		if r == 3 {
			if err := g.JoinGroup(); err != nil {
				t.Errorf("join_group: %v", err)
			}
		} else {
			waitFor(t, "peer state", func() bool { ok, _ := g.PeerState([]int{3}); return ok[0] })
			if res, err := g.Propose(true, []int{3}); err != nil || res.Status != ProposalApplied {
				t.Errorf("rank %d: recover_ranks([3]): %+v, %v", r, res, err)
			}
		}
		waitFor(t, "mask 1111", func() bool { return mask(g) == "1111" })
		tensorOps(t, r, g, 4, []int{0, 1, 2, 3})
	})
}

// die ends rank r's process as a crash does: its connections break and
// it tells nobody (kill closes the group first, which is a graceful
// leave). The group's own resources go at the test's end.
func (e *elasticRanks) die(r int) {
	g := e.gs[r]
	e.rts[r].Close()
	e.rts[r], e.gs[r] = nil, nil
	e.t.Cleanup(func() { g.Close() })
}

// waitWatching waits until rank r of e watches the coordinator (a process
// does within moments of its init).
func (e *elasticRanks) waitWatching(r int) {
	e.t.Helper()
	coord := e.rts[0].coord
	waitFor(e.t, fmt.Sprintf("rank %d's watch", r), func() bool {
		coord.mu.Lock()
		defer coord.mu.Unlock()
		return coord.groups["elastic"].watching[r] > 0
	})
}

// The recovery cycle with the tensor ops sized for the survivors at once
// (issue 35, upstream's overflow layout): rank 3 dies between two ops and
// no op of the survivors meets it; their next all_gather and
// reduce_scatter have 3 blocks while the world size is still 4. The
// all_gather waits for the offline rank's deactivation, which every
// survivor applies between the same two collectives, and completes with
// rank 3 marked on every survivor (one outcome); the reduce_scatter after
// it is a plain success. A replacement then joins slot 3, is recovered,
// and the four run both ops with 4 blocks.
func TestOfflineRankLeavesBetweenOpsSizedForSurvivors(t *testing.T) {
	e := found(t, 4, 4, false)
	e.each(func(t *testing.T, r int, g *Group) { tensorOps(t, r, g, 4, []int{0, 1, 2, 3}) })
	e.waitWatching(3)
	e.die(3)
	e.each(func(t *testing.T, r int, g *Group) {
		out := filled(-1, 3)
		w, err := g.AllGather(f32bytes(float32(r)), out)
		must(t, g, "all_gather sized for 3", w, err)
		if err == nil {
			if !slices.Equal(w.FailedRanks(), []int{3}) || w.LocalSuccess() {
				t.Errorf("rank %d: all_gather past the death: failed %v, local success %v", r, w.FailedRanks(), w.LocalSuccess())
			}
		}
		if !bytes.Equal(out, f32bytes(0, 1, 2)) {
			t.Errorf("rank %d: all_gather sized for 3 = %v", r, out)
		}
		if mask(g) != "1110" || g.WorldSize() != 3 {
			t.Errorf("rank %d: mask %s, world size %d", r, mask(g), g.WorldSize())
		}
		in := f32bytes(float32(r+1), float32(2*(r+1)), float32(3*(r+1)))
		res := make([]byte, 4)
		w, err = g.ReduceScatter(in, res, 1, Float32, Sum)
		must(t, g, "reduce_scatter sized for 3", w, err)
		if err == nil && (!w.LocalSuccess() || len(w.FailedRanks()) > 0) {
			t.Errorf("rank %d: reduce_scatter after the deactivation: failed %v", r, w.FailedRanks())
		}
		if !bytes.Equal(res, f32bytes(float32(6*(r+1)))) {
			t.Errorf("rank %d: reduce_scatter sized for 3 = %v", r, res)
		}
	})
	e.extend(3, 4, 4)
	e.activate(3, "1111")
	e.each(func(t *testing.T, r int, g *Group) { tensorOps(t, r, g, 4, []int{0, 1, 2, 3}) })
}

// An all_gather sized for fewer ranks than a group that stays whole waits
// for it to shrink, then fails on every rank with ErrInvalid, its output
// untouched; the group stays usable.
func TestSizedForFewerRanksFailsWhenNobodyLeaves(t *testing.T) {
	e := found(t, 2, 2, false)
	e.each(func(t *testing.T, r int, g *Group) {
		out := filled(-1, 1)
		w, err := g.AllGather(f32bytes(float32(r)), out)
		if err == nil {
			_, err = w.Wait(0)
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("rank %d: all_gather sized for 1 of 2: %v, want ErrInvalid", r, err)
		}
		if !bytes.Equal(out, filled(-1, 1)) {
			t.Errorf("rank %d: the refused all_gather wrote %v", r, out)
		}
		if w := allReduceRanks(t, r, g, 3); w != nil && !w.LocalSuccess() {
			t.Errorf("rank %d: all_reduce after the refused op: failed %v", r, w.FailedRanks())
		}
	})
}

// A proposal is answered only once every member has left the collectives
// of the base it replaces (faults.go, leaveOlderBase): a rank still in
// one (here marked as running a collective of base 0) applies the new
// view at once but acknowledges it only when that collective is over, so
// the proposer's next collective, in the new base, cannot be taken for
// the old one's messages.
func TestProposalWaitsForCollectivesOfTheOldBase(t *testing.T) {
	e := found(t, 4, 4, false)
	g2 := e.gs[2]
	g2.collAt.Store(g2.collBase + 1)
	done := make(chan ProposalResult, 1)
	go func() {
		res, err := e.gs[0].Propose(false, []int{3})
		if err != nil {
			t.Errorf("deactivate 3: %v", err)
		}
		done <- res
	}()
	waitFor(t, "rank 2 to apply the new view", func() bool { return mask(g2) == "1110" })
	select {
	case res := <-done:
		t.Fatalf("the proposal was answered (%+v) while rank 2 was in a collective of the old base", res)
	default:
	}
	g2.collAt.Store(0) // the collective ends
	if res := <-done; res.Status != ProposalApplied {
		t.Errorf("deactivate 3: %+v", res)
	}
}

// A process that joins a formed group as a founder (no Extension: what
// upstream's three-argument options and the one-argument form give) for
// a slot a live member holds is refused at once, with an error that says
// to pass is_extension=True; before, it waited as the founder of a round
// that never completes, until the init timeout. The group goes on, and its
// members' own processes still re-initialise it under the same name (the
// re-init's founding joins come from segments the group knows).
func TestALateFounderOfATakenSlotIsRefused(t *testing.T) {
	e := found(t, 3, 3, false)
	e.each(func(t *testing.T, r int, g *Group) { allReduceRanks(t, r, g, 6) })
	e.waitWatching(1)
	late := shortTimeoutRuntime()
	defer late.Close()
	start := time.Now()
	g, err := late.NewGroup(GroupConfig{Rank: 1, Size: 3, MaxSize: 3, GroupID: "elastic", Store: e.store,
		CollSlot: 4096, P2PSlot: 4096})
	if err == nil {
		g.Close()
		t.Fatal("a second process was admitted as founder of rank 1 while rank 1 is alive")
	}
	if !strings.Contains(err.Error(), "is_extension=True") || !strings.Contains(err.Error(), "rank 1 is held by a live member") {
		t.Fatalf("late founder: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the late founder was refused after %v", took)
	}
	e.each(func(t *testing.T, r int, g *Group) { allReduceRanks(t, r, g, 6) })
	// Re-init by the members, one of them before the others destroyed
	// theirs: it waits for them as before.
	e.gs[2].Close()
	e.gs[2] = nil
	reinit := make(chan error, 1)
	go func() {
		g, err := e.rts[2].NewGroup(GroupConfig{Rank: 2, Size: 3, MaxSize: 3, GroupID: "elastic", Store: e.store,
			CollSlot: 4096, P2PSlot: 4096})
		e.gs[2] = g
		reinit <- err
	}()
	time.Sleep(100 * time.Millisecond)
	for r := range 2 {
		e.gs[r].Close()
		e.gs[r] = nil
	}
	gs, errs := createGroups(e.rts[:2], 3, GroupConfig{MaxSize: 3, GroupID: "elastic", Store: e.store,
		CollSlot: 4096, P2PSlot: 4096})
	if err := <-reinit; err != nil {
		t.Fatalf("re-init of rank 2: %v", err)
	}
	for r, err := range errs {
		if err != nil {
			t.Fatalf("re-init of rank %d: %v", r, err)
		}
		e.gs[r] = gs[r]
	}
	e.each(func(t *testing.T, r int, g *Group) { allReduceRanks(t, r, g, 6) })
}

// A late founder (no Extension) of a formed group's free slot — here a
// dead member's — cannot be told from a founder of a re-init whose other
// founders are still in the old group, so it waits for them; when the
// init timeout ends the wait, its error says what a late rank needs.
func TestALateFounderOfAFreeSlotFailsAtTheInitTimeoutNamingIsExtension(t *testing.T) {
	e := found(t, 3, 3, false)
	e.each(func(t *testing.T, r int, g *Group) { allReduceRanks(t, r, g, 6) })
	e.die(2)
	t.Setenv("MC_PG_INIT_TIMEOUT", "1")
	late := shortTimeoutRuntime()
	defer late.Close()
	g, err := late.NewGroup(GroupConfig{Rank: 2, Size: 3, MaxSize: 3, GroupID: "elastic", Store: e.store,
		CollSlot: 4096, P2PSlot: 4096})
	if err == nil {
		g.Close()
		t.Fatal("a late founder of a formed group was created")
	}
	if !strings.Contains(err.Error(), "did not join within 1s") || !strings.Contains(err.Error(), "is_extension=True") {
		t.Fatalf("late founder of a free slot: %v", err)
	}
}
