package testutil

import (
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"
)

// startService starts a service a test runs against (etcd,
// redis-server): its output is kept for the failure message, and it is
// killed and reaped in t.Cleanup. It waits until ready returns nil; the
// test fails if the process exits first or limit passes. Cleanups run
// last-registered first, so a directory the caller made with t.TempDir
// before the call outlives the process.
func startService(t testing.TB, what, bin string, args []string, limit time.Duration, ready func() error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out := &syncBuffer{}
	cmd.Stdout = out
	cmd.Stderr = out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	if err := waitReady(ready, limit, exited); err != nil {
		t.Fatalf("%s: %v\noutput:\n%s", what, err, out.tail(4096))
	}
}

// errExited is waitReady's error when the process ended first.
var errExited = errors.New("exited before becoming ready")

// waitReady polls ready every 50 ms until it returns nil, exited closes,
// or limit passes.
func waitReady(ready func() error, limit time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-exited:
			return errExited
		default:
		}
		last := ready()
		if last == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not ready after %v: %v", limit, last)
		}
		select {
		case <-exited:
			return errExited
		case <-time.After(50 * time.Millisecond):
		}
	}
}
