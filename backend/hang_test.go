package backend

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// hangScenario runs 4 in-process ranks with short timeouts and the given
// hang timeout; rank `hung` runs its own function (alive throughout: its
// engine answers probes), the others run live.
func hangScenario(t *testing.T, hang time.Duration, hung int, stuck, live func(t *testing.T, g *Group)) {
	t.Helper()
	newRT := func() *Runtime {
		rt := shortTimeoutRuntime()
		if err := rt.SetHangTimeout(hang); err != nil {
			t.Fatal(err)
		}
		return rt
	}
	rts, gs := startRanks(t, 4, newRT, GroupConfig{GroupID: "hang", Store: NewMemStore()})
	defer func() {
		for r := range 4 {
			gs[r].Close()
			rts[r].Close()
		}
	}()
	runAll(t, gs, 60*time.Second, func(t *testing.T, r int, g *Group) {
		if r == hung {
			stuck(t, g)
			return
		}
		live(t, g)
	})
}

func allReduceRank(t *testing.T, g *Group) (*Work, []byte, error) {
	t.Helper()
	buf := f32bytes(float32(g.Rank() + 1))
	w, err := g.AllReduce(buf, 1, Float32, Sum)
	if err == nil {
		_, err = w.Wait(0)
	}
	return w, buf, err
}

// A rank whose process is alive but which does not call the collective
// its peers are in is failed after the hang timeout: the peers' op
// completes without it (the hint names it, the result covers the others),
// and later ops run without it. When it calls at last, its op completes
// as left out (local success false) and the next one is refused, so it
// cannot disturb the others.
func TestHungRankIsFailedAfterTheHangTimeout(t *testing.T) {
	const hung = 2
	const hang = 500 * time.Millisecond
	excluded := make(chan struct{})
	// Each waiting rank runs its own hang timer, and the first to expire
	// fails the hung rank for all: so every survivor's op ends at least
	// the hang timeout after the earliest survivor entered it.
	var mu sync.Mutex
	var entered, failed [4]time.Time
	hangScenario(t, hang, hung, func(t *testing.T, g *Group) {
		if _, buf, err := allReduceRank(t, g); err != nil || !bytes.Equal(buf, f32bytes(10)) {
			t.Errorf("rank %d: first all_reduce: %v %v", g.Rank(), buf, err)
		}
		<-excluded // "hangs" until the others went on without it
		w, _, err := allReduceRank(t, g)
		if err != nil && !errors.Is(err, ErrInactive) {
			t.Errorf("woken rank: all_reduce: %v, want completion as left out or ErrInactive", err)
		} else if err == nil && w.LocalSuccess() {
			t.Errorf("woken rank: all_reduce succeeded, failed %v", w.FailedRanks())
		}
		if _, _, err := allReduceRank(t, g); !errors.Is(err, ErrInactive) {
			t.Errorf("woken rank: second all_reduce: %v, want ErrInactive", err)
		}
	}, func(t *testing.T, g *Group) {
		if _, buf, err := allReduceRank(t, g); err != nil || !bytes.Equal(buf, f32bytes(10)) {
			t.Errorf("rank %d: first all_reduce: %v %v", g.Rank(), buf, err)
		}
		start := time.Now()
		buf := f32bytes(float32(g.Rank() + 1))
		w, err := g.AllReduce(buf, 1, Float32, Sum)
		expectFailedOp(t, g, "all_reduce the hung rank never called", w, err, hung, false)
		mu.Lock()
		entered[g.Rank()], failed[g.Rank()] = start, time.Now()
		mu.Unlock()
		if !bytes.Equal(buf, f32bytes(7)) {
			t.Errorf("rank %d: %v, want the others' sum 7", g.Rank(), buf)
		}
		survivorsContinue(t, g)
		if g.Rank() == 0 {
			close(excluded)
		}
	})
	first := entered[0]
	for r, at := range entered {
		if r != hung && at.Before(first) {
			first = at
		}
	}
	for r, at := range failed {
		if took := at.Sub(first); r != hung && took < hang {
			t.Errorf("rank %d: the hung rank was failed %v after the first survivor entered the op, before the hang timeout", r, took)
		}
	}
}

// A rank that is late, but within the hang timeout, is waited for: every
// op succeeds on every rank with everyone's data.
func TestLateRankWithinTheHangTimeoutIsNotFailed(t *testing.T) {
	const late = 1
	each := func(t *testing.T, g *Group) {
		for i := range 3 {
			if g.Rank() == late {
				time.Sleep(400 * time.Millisecond) // above the collective timeout, below the hang timeout
			}
			w, buf, err := allReduceRank(t, g)
			if err != nil || !w.LocalSuccess() || len(w.FailedRanks()) > 0 || !bytes.Equal(buf, f32bytes(10)) {
				t.Errorf("rank %d, op %d: %v success %v failed %v err %v", g.Rank(), i, buf, w.LocalSuccess(), w.FailedRanks(), err)
			}
		}
		if v := g.View(); fmt.Sprint(v.Active) != "[true true true true]" {
			t.Errorf("rank %d: view %v", g.Rank(), v.Active)
		}
	}
	hangScenario(t, 2*time.Second, late, each, each)
}
