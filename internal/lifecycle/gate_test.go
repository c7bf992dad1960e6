package lifecycle

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestGateWaitsForAdmittedCalls(t *testing.T) {
	var g Gate
	if !g.Enter() {
		t.Fatal("open gate refused a call")
	}
	var released, canceled atomic.Bool
	closed := make(chan struct{})
	go func() {
		g.Close(func() { canceled.Store(true) }, func() { released.Store(true) })
		close(closed)
	}()
	for !g.Closing() {
	}
	if g.Enter() {
		t.Fatal("closing gate admitted a call")
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a call was admitted")
	default:
	}
	if released.Load() {
		t.Fatal("released while a call was admitted")
	}
	g.Exit()
	<-closed
	if !canceled.Load() || !released.Load() {
		t.Fatalf("canceled=%v released=%v", canceled.Load(), released.Load())
	}
}

func TestGateClosesOnce(t *testing.T) {
	var g Gate
	var releases atomic.Int32
	var firsts atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if g.Close(nil, func() { releases.Add(1) }) {
				firsts.Add(1)
			}
			if releases.Load() != 1 {
				t.Error("Close returned before release ran")
			}
		}()
	}
	wg.Wait()
	if releases.Load() != 1 || firsts.Load() != 1 {
		t.Fatalf("release ran %d times, %d first closers", releases.Load(), firsts.Load())
	}
}

func TestGateExitWithoutEnterPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	var g Gate
	g.Exit()
}
