package transfer

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
)

// hangLimit bounds a hang in these tests; it is far above the time the
// work takes and no speed claim.
const hangLimit = 2 * time.Minute

// within runs fn and fails the test, with every goroutine's stack, when fn
// has not returned within hangLimit.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(hangLimit):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%s: still running after %v:\n%s", what, hangLimit, buf)
	}
}

// TestSelfTransferRacesUnregister runs transfers whose source and target
// lie in the same registered region of one engine while that region is
// unregistered (issue 33 #6). A transfer must either complete or fail;
// none may wait forever: one that held the region for its source and took
// it again for its target, behind a pending unregistration, deadlocked,
// and Close with it.
func TestSelfTransferRacesUnregister(t *testing.T) {
	const n, workers, rounds = 64 << 10, 4, 2000
	e := newTestEngine(t, true)
	mem := anonMemory(t, n)
	base := gpu.AddrOf(mem)
	if err := e.RegisterLocalMemory(base, n, ""); err != nil {
		t.Fatal(err)
	}

	// The interleaving that deadlocked, made certain: once the transfer
	// holds its source and has found its target (the same region), an
	// unregistration starts and is let run up to where it waits for the
	// region's uses before the transfer takes its target.
	target := uint64(base) + n/2
	unregistered := make(chan error, 1)
	testHookFound = func(r *region, addr uintptr) {
		if uint64(addr) != target {
			return
		}
		go func() { unregistered <- e.UnregisterLocalMemory(base) }()
		for e.reg.find(base, 1) != nil {
			runtime.Gosched()
		}
		time.Sleep(20 * time.Millisecond) // lets the removal reach its wait
	}
	within(t, "a self-transfer racing unregistration", func() {
		// Failing is right (the target went away); hanging is not.
		e.TransferSync(e.Name(), []Request{{Opcode: OpWrite, Source: base, TargetOffset: target, Length: n / 2}})
		if err := <-unregistered; err != nil {
			t.Errorf("unregister: %v", err)
		}
	})
	testHookFound = nil
	if err := e.RegisterLocalMemory(base, n, ""); err != nil {
		t.Fatal(err)
	}

	// The same race left to the scheduler, many times over, then Close.
	var stop atomic.Bool
	var completed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part := uint64(n / 2 / workers)
			src := base + uintptr(uint64(w)*part)
			dst := uint64(base) + n/2 + uint64(w)*part
			for i := 0; !stop.Load(); i++ {
				op := []Opcode{OpWrite, OpRead}[i%2]
				if e.TransferSync(e.Name(), []Request{{Opcode: op, Source: src, TargetOffset: dst, Length: part}}) == nil {
					completed.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer stop.Store(true)
		for range rounds {
			if err := e.UnregisterLocalMemory(base); err != nil {
				t.Errorf("unregister: %v", err)
				return
			}
			runtime.Gosched()
			if err := e.RegisterLocalMemory(base, n, ""); err != nil {
				t.Errorf("register: %v", err)
				return
			}
			runtime.Gosched()
		}
	}()
	within(t, "self-transfers racing unregistration, then Close", func() {
		wg.Wait()
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if completed.Load() == 0 {
		t.Errorf("no self-transfer completed in %d register/unregister rounds", rounds)
	}
}
