package testutil

import (
	"sync"
	"testing"
	"time"
)

// WaitOrFail waits for wg and fails the test when it has not finished
// within limit: a hang detector for tests whose goroutines must all return
// (limit is a bound on a hang, far above the expected time, not a speed
// claim).
func WaitOrFail(t testing.TB, wg *sync.WaitGroup, limit time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s: still running after %v", what, limit)
	}
}

// WaitUntil polls cond every 20 ms and fails the test when it has not
// held within limit (a bound on a hang, not a speed claim).
func WaitUntil(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
