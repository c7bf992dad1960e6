package backend

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"
)

func f32bytes(vs ...float32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func filled(v float32, n int) []byte {
	vs := make([]float32, n)
	for i := range vs {
		vs[i] = v
	}
	return f32bytes(vs...)
}

// deathScenario runs n in-process ranks with short timeouts; rank `dead`
// runs die (its last ops) and then goes away (its group and engine close,
// so probes of it fail); the others run live.
func deathScenario(t *testing.T, n, dead, slot int, die func(g *Group), live func(t *testing.T, g *Group)) {
	t.Helper()
	rts, gs := startRanks(t, n, shortTimeoutRuntime, GroupConfig{GroupID: "faults", Store: NewMemStore(), CollSlot: slot, P2PSlot: slot})
	defer func() {
		for r := range n {
			gs[r].Close()
			rts[r].Close()
		}
	}()
	runAll(t, gs, 60*time.Second, func(t *testing.T, r int, g *Group) {
		if r != dead {
			live(t, g)
			return
		}
		die(g)
		g.Close()
		rts[r].Close()
	})
}

// shortTimeoutRuntime is a Runtime that judges a silent peer after 300 ms
// and reconciles within 2 s.
func shortTimeoutRuntime() *Runtime {
	rt := NewRuntime()
	_ = rt.SetCollectiveTimeout(300 * time.Millisecond)
	_ = rt.SetP2PTimeout(300 * time.Millisecond)
	_ = rt.SetFaultReconciliationWindow(2 * time.Second)
	return rt
}

// expectFailedOp checks an op that ran while rank `dead` died: it
// completes without an error and marks the dead rank. A rank whose op
// started only after the others had reconciled (it took part from its idle
// queue: in-process deaths are seen at once) runs it among the survivors
// with nothing to report; lenient allows that.
func expectFailedOp(t *testing.T, g *Group, what string, w *Work, err error, dead int, lenient bool) {
	t.Helper()
	if err != nil {
		t.Fatalf("rank %d: %s: %v", g.Rank(), what, err)
	}
	if _, err := w.Wait(0); err != nil {
		t.Errorf("rank %d: %s raised: %v", g.Rank(), what, err)
	}
	if lenient && w.LocalSuccess() && len(w.FailedRanks()) == 0 && !g.View().Active[dead] {
		return
	}
	if w.LocalSuccess() || fmt.Sprint(w.FailedRanks()) != fmt.Sprint([]int{dead}) {
		t.Errorf("rank %d: %s: local success %v, failed %v; want false, [%d]", g.Rank(), what, w.LocalSuccess(), w.FailedRanks(), dead)
	}
}

// survivorsContinue: after rank 2's death the survivors' view drops it,
// and every op the view allows works among them.
func survivorsContinue(t *testing.T, g *Group) {
	if v := g.View(); fmt.Sprint(v.Active) != "[true true false true]" || v.WorldSize() != 4 {
		t.Errorf("rank %d: view %+v", g.Rank(), v)
	}
	buf := f32bytes(float32(g.Rank() + 1))
	w, err := g.AllReduce(buf, 1, Float32, Sum)
	must(t, g, "all_reduce among survivors", w, err)
	if !bytes.Equal(buf, f32bytes(7)) || !w.LocalSuccess() {
		t.Errorf("rank %d: all_reduce among survivors: %v, success %v failed %v", g.Rank(), buf, w.LocalSuccess(), w.FailedRanks())
	}
	gathered := filled(-1, 4)
	w, err = g.AllGather(f32bytes(float32(g.Rank())), gathered)
	must(t, g, "all_gather among survivors", w, err)
	if !bytes.Equal(gathered, f32bytes(0, 1, -1, 3)) {
		t.Errorf("rank %d: all_gather among survivors: %v", g.Rank(), gathered)
	}
	b := f32bytes(float32(g.Rank()))
	w, err = g.Broadcast(b, 3)
	must(t, g, "broadcast among survivors", w, err)
	if !bytes.Equal(b, f32bytes(3)) {
		t.Errorf("rank %d: broadcast: %v", g.Rank(), b)
	}
	w, err = g.Barrier()
	must(t, g, "barrier among survivors", w, err)
	switch g.Rank() {
	case 0:
		w, err = g.Send(f32bytes(42), 3)
		must(t, g, "send among survivors", w, err)
	case 3:
		got := make([]byte, 4)
		w, err = g.Recv(got, 0)
		must(t, g, "recv among survivors", w, err)
		if !bytes.Equal(got, f32bytes(42)) {
			t.Errorf("recv among survivors: %v", got)
		}
	}
}

// Rank 2 of 4 dies between two all_reduces: the survivors' second
// all_reduce completes without raising, covers the survivors only, marks
// rank 2; later ops run among the survivors.
func TestDeathBetweenAllReduces(t *testing.T) {
	first := func(g *Group) {
		buf := f32bytes(float32(g.Rank() + 1))
		w, err := g.AllReduce(buf, 1, Float32, Sum)
		must(t, g, "first all_reduce", w, err)
		if !bytes.Equal(buf, f32bytes(10)) {
			t.Errorf("rank %d: first all_reduce: %v", g.Rank(), buf)
		}
	}
	deathScenario(t, 4, 2, 0, first, func(t *testing.T, g *Group) {
		first(g)
		buf := f32bytes(float32(g.Rank() + 1))
		w, err := g.AllReduce(buf, 1, Float32, Sum)
		expectFailedOp(t, g, "all_reduce after the death", w, err, 2, true)
		if !bytes.Equal(buf, f32bytes(7)) {
			t.Errorf("rank %d: all_reduce after the death: %v, want the survivors' sum 7", g.Rank(), buf)
		}
		survivorsContinue(t, g)
	})
}

// Rank 2 dies in the middle of a multi-chunk all_reduce: the survivors' op
// completes without raising and marks it (its result is unspecified when
// buffers were already partly reduced). A survivor that had not started
// the op before the others reconciled runs it among the survivors from
// the start: no failure to report, and the survivors' sum. The next ops
// are correct.
func TestDeathDuringMultiChunkAllReduce(t *testing.T) {
	const count = 4 << 20 // 16 MiB in 64 KiB slots: 64 chunks, far more than 5 ms
	// died is closed once the dying rank has looked whether its op was
	// already complete when it died (opDone): then the death came after
	// the op on every rank (a machine fast enough), and its result is the
	// full sum.
	died := make(chan struct{})
	var opDone atomic.Bool
	die := func(g *Group) {
		w, _ := g.AllReduce(filled(1, count), count, Float32, Sum)
		time.Sleep(5 * time.Millisecond)
		opDone.Store(w != nil && w.Completed())
		close(died)
	}
	deathScenario(t, 4, 2, 64<<10, die, func(t *testing.T, g *Group) {
		buf := filled(1, count)
		w, err := g.AllReduce(buf, count, Float32, Sum)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Wait(0); err != nil {
			t.Fatalf("rank %d: all_reduce during the death raised: %v", g.Rank(), err)
		}
		<-died
		if w.LocalSuccess() && opDone.Load() {
			t.Logf("rank %d: the op completed before the death", g.Rank())
			if !bytes.Equal(buf, filled(4, count)) {
				t.Errorf("rank %d: all_reduce completed before the death is not the full sum", g.Rank())
			}
		} else if w.LocalSuccess() {
			if !bytes.Equal(buf, filled(3, count)) {
				t.Errorf("rank %d: all_reduce run after the reconciliation is not the survivors' sum", g.Rank())
			}
		} else if fmt.Sprint(w.FailedRanks()) != "[2]" {
			t.Errorf("rank %d: all_reduce during the death: failed %v, want [2]", g.Rank(), w.FailedRanks())
		}
		buf = filled(float32(g.Rank()+1), count)
		w, err = g.AllReduce(buf, count, Float32, Sum)
		must(t, g, "large all_reduce among survivors", w, err)
		if !bytes.Equal(buf, filled(7, count)) {
			t.Errorf("rank %d: large all_reduce among survivors is wrong", g.Rank())
		}
		survivorsContinue(t, g)
	})
}

// Rank 2 dies while rank 1 sends to it: the send completes without
// raising and marks rank 2; the survivors go on (their next collective
// already runs without it).
func TestDeathDuringSend(t *testing.T) {
	deathScenario(t, 4, 2, 4<<10, func(g *Group) {}, func(t *testing.T, g *Group) {
		if g.Rank() == 1 {
			w, err := g.Send(filled(1, 64<<10), 2) // more than two slots: needs the receiver
			expectFailedOp(t, g, "send to the dead rank", w, err, 2, false)
		}
		buf := f32bytes(float32(g.Rank() + 1))
		w, err := g.AllReduce(buf, 1, Float32, Sum)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Wait(0); err != nil || !bytes.Equal(buf, f32bytes(7)) {
			t.Errorf("rank %d: all_reduce after the send failure: %v %v", g.Rank(), err, buf)
		}
		survivorsContinue(t, g)
	})
}

// A fast rank opens a reconciliation window for collective k+1 while a
// slow rank is still in collective k (it waits for a third rank that is
// late into k). The slow ranks must finish k before they take part, so
// that every survivor reconciles at k+1: nothing diverges, k completes
// everywhere, and k+1 completes over the survivors.
func TestWindowAtNextCollectiveLetsSlowRanksFinish(t *testing.T) {
	const dead, root, late = 2, 1, 3
	rts, gs := startRanks(t, 4, func() *Runtime {
		rt := shortTimeoutRuntime()
		_ = rt.SetFaultReconciliationWindow(20 * time.Second) // ends early, once every survivor synced
		return rt
	}, GroupConfig{GroupID: "window-op", Store: NewMemStore()})
	gone := make(chan struct{}) // closed once the dead rank is gone
	defer func() {
		for r := range gs {
			gs[r].Close()
			rts[r].Close()
		}
	}()
	runAll(t, gs, 60*time.Second, func(t *testing.T, r int, g *Group) {
		buf := f32bytes(float32(r + 1))
		w, err := g.AllReduce(buf, 1, Float32, Sum)
		must(t, g, "first all_reduce", w, err)
		if r == late {
			// Rank 1 (the root) waits for this rank's block in the gather
			// while rank 0, done with its part, reaches the next op.
			time.Sleep(1500 * time.Millisecond)
		}
		var gathered []byte
		if r == root {
			gathered = filled(-1, 4)
		}
		w, err = g.Gather(f32bytes(float32(10+r)), gathered, root)
		must(t, g, "gather (collective k)", w, err)
		if r == root && !bytes.Equal(gathered, f32bytes(10, 11, 12, 13)) {
			t.Errorf("rank %d: gather: %v", r, gathered)
		}
		if r == dead {
			g.Close()
			rts[r].Close()
			close(gone)
			return
		}
		<-gone // rank 0 meets the death at once in collective k+1
		buf = f32bytes(float32(r + 1))
		w, err = g.AllReduce(buf, 1, Float32, Sum)
		expectFailedOp(t, g, "all_reduce (collective k+1) past the death", w, err, dead, true)
		if !bytes.Equal(buf, f32bytes(7)) {
			t.Errorf("rank %d: all_reduce past the death: %v, want the survivors' sum 7", r, buf)
		}
		if !t.Failed() {
			survivorsContinue(t, g)
		}
	})
}

// A rank that dies during a multi-chunk all_to_all fails the op with it
// named, or the op is complete or re-run among the survivors, and the
// survivors go on.
func TestDeathDuringMultiChunkAllToAll(t *testing.T) {
	// The pairwise algorithm (the default), so that the op lasts long
	// enough for rank 2 to die inside it: read with CMA, the 4 MiB blocks
	// moved in about a millisecond, before the death, and the survivors'
	// op succeeded with rank 2 still in the view.
	// TestCMAFailedReadFailsThePeer covers a death under CMA.
	const block = 4 << 20 // per peer, in 64 KiB slots: 64 chunks each
	sizes := []int{block, block, block, block}
	in := func(r int) []byte {
		b := make([]byte, 4*block)
		for p := range 4 {
			copy(b[p*block:], bytes.Repeat([]byte{byte(16*r + p)}, block))
		}
		return b
	}
	died := make(chan struct{})
	var opDone atomic.Bool
	die := func(g *Group) {
		w, _ := g.AllToAll(in(g.Rank()), make([]byte, 4*block), sizes, sizes)
		time.Sleep(5 * time.Millisecond)
		opDone.Store(w != nil && w.Completed())
		close(died)
	}
	deathScenario(t, 4, 2, 64<<10, die, func(t *testing.T, g *Group) {
		me := g.Rank()
		outBuf := bytes.Repeat([]byte{0xee}, 4*block)
		w, err := g.AllToAll(in(me), outBuf, sizes, sizes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Wait(0); err != nil {
			t.Fatalf("rank %d: all_to_all during the death raised: %v", me, err)
		}
		<-died
		switch {
		case w.LocalSuccess():
			for _, p := range []int{0, 1, 3} {
				if !bytes.Equal(outBuf[p*block:(p+1)*block], bytes.Repeat([]byte{byte(16*p + me)}, block)) {
					t.Errorf("rank %d: all_to_all that succeeded has a wrong block from rank %d", me, p)
				}
			}
			if opDone.Load() && !bytes.Equal(outBuf[2*block:3*block], bytes.Repeat([]byte{byte(32 + me)}, block)) {
				t.Errorf("rank %d: all_to_all completed before the death has a wrong block from rank 2", me)
			}
		case fmt.Sprint(w.FailedRanks()) != "[2]":
			t.Errorf("rank %d: all_to_all during the death: failed %v, want [2]", me, w.FailedRanks())
		}
		survivorsContinue(t, g)
	})
}
