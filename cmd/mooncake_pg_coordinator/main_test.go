package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/backend"
	"github.com/mooncake-go/mooncake/internal/cli"
)

func TestHelpAndBadFlags(t *testing.T) {
	var out, log bytes.Buffer
	if err := run([]string{"--help"}, &out, &log, nil); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(log.String(), "--idle_exit_seconds") && !strings.Contains(log.String(), "-idle_exit_seconds") {
		t.Errorf("usage lacks the flags:\n%s", log.String())
	}
	for _, args := range [][]string{{"--port", "70000"}, {"--idle_exit_seconds", "-1"}, {"extra"}, {"--no_such_flag"}} {
		err := run(args, &out, &log, nil)
		if !errors.As(err, new(cli.UsageError)) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	if err := run([]string{"--host", "192.0.2.1"}, &out, &log, nil); err == nil || errors.As(err, new(cli.UsageError)) {
		t.Errorf("unbindable host: %v, want a listen error", err)
	}
}

// TestIdleWatch: the process ends when no rank connected in time, or when
// the last connection has been closed for the idle time; a connection in
// between keeps it.
func TestIdleWatch(t *testing.T) {
	ended := func(w *idleWatch, within time.Duration) (string, bool) {
		select {
		case why := <-w.done:
			return why, true
		case <-time.After(within):
			return "", false
		}
	}
	w := newIdleWatch(50*time.Millisecond, 50*time.Millisecond)
	if why, ok := ended(w, 2*time.Second); !ok || !strings.Contains(why, "no rank connected within") {
		t.Fatalf("no client: %q %v", why, ok)
	}

	w = newIdleWatch(100*time.Millisecond, 50*time.Millisecond)
	w.ConnOpened()
	w.ConnOpened()
	if _, ok := ended(w, 200*time.Millisecond); ok {
		t.Fatal("ended with clients connected")
	}
	w.ConnClosed()
	if _, ok := ended(w, 200*time.Millisecond); ok {
		t.Fatal("ended with one client still connected")
	}
	w.ConnClosed()
	time.Sleep(50 * time.Millisecond)
	w.ConnOpened() // back before the idle time passed
	if _, ok := ended(w, 300*time.Millisecond); ok {
		t.Fatal("ended though a client came back")
	}
	w.ConnClosed()
	if why, ok := ended(w, 2*time.Second); !ok || !strings.Contains(why, "no rank connected for") {
		t.Fatalf("idle: %q %v", why, ok)
	}

	w = newIdleWatch(0, 0) // both rules off
	w.ConnOpened()
	w.ConnClosed()
	if _, ok := ended(w, 200*time.Millisecond); ok {
		t.Fatal("ended with the idle rule off")
	}
}

var (
	binOnce sync.Once
	bin     string
	binErr  error
)

// buildCoordinator builds this command once per test run.
func buildCoordinator(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mooncake-pg-coordinator-test")
		if err != nil {
			binErr = err
			return
		}
		bin = filepath.Join(dir, backend.CoordinatorCommand)
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return bin
}

// found starts n in-process ranks of group id, each on its own runtime
// from rts, all at once.
func found(t *testing.T, rts []*backend.Runtime, id string, store backend.Store) []*backend.Group {
	t.Helper()
	gs := make([]*backend.Group, len(rts))
	errs := make([]error, len(rts))
	var wg sync.WaitGroup
	for r, rt := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[r], errs[r] = rt.NewGroup(backend.GroupConfig{Rank: r, Size: len(rts), GroupID: id, Store: store})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d of %q: %v", r, id, err)
		}
	}
	return gs
}

// TestCoordinatorProcessOutlivesRankZero: rank 0's runtime starts the
// coordinator as a process of its own; once rank 0 has closed everything
// (its process could have died), the other ranks still reach the
// coordinator and found a new group through it. The same steps with the
// coordinator inside rank 0 fail, which is what the process is for.
func TestCoordinatorProcessOutlivesRankZero(t *testing.T) {
	b := buildCoordinator(t)
	for _, tc := range []struct {
		bin       string
		survives  bool
		placement string
	}{{b, true, "process"}, {"", false, "inprocess"}} {
		t.Run(tc.placement, func(t *testing.T) {
			rts := make([]*backend.Runtime, 3)
			for i := range rts {
				rts[i] = backend.NewRuntime()
				rts[i].SetCoordinatorBinary(tc.bin)
				rts[i].SetCollectiveTimeout(2 * time.Second)
			}
			defer func() {
				for _, rt := range rts {
					rt.Close()
				}
			}()
			store := backend.NewMemStore()
			gs := found(t, rts, "first", store)
			addr, err := store.Get(backend.CoordinatorKey, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gs {
				g.Close()
			}
			rts[0].Close() // rank 0 and whatever it hosts are gone
			if !tc.survives {
				t.Setenv("MC_PG_INIT_TIMEOUT", "2")
			}
			done := make(chan []error, 1)
			go func() {
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for r := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var g *backend.Group
						g, errs[r] = rts[r+1].NewGroup(backend.GroupConfig{Rank: r, Size: 2, GroupID: "second", Store: store})
						if g != nil {
							w, err := g.Barrier()
							if err == nil {
								_, err = w.Wait(10 * time.Second)
							}
							errs[r] = err
							g.Close()
						}
					}()
				}
				wg.Wait()
				done <- errs
			}()
			errs := <-done
			if tc.survives {
				for r, err := range errs {
					if err != nil {
						t.Fatalf("after rank 0 left, rank %d could not use the coordinator at %s: %v", r+1, addr, err)
					}
				}
				return
			}
			if errs[0] == nil && errs[1] == nil {
				t.Fatal("a coordinator inside rank 0 outlived it")
			}
		})
	}
}

// TestAnnouncedCoordinatorExitsWhenIdle runs the command as rank 0 would
// and checks it serves, then exits once its only client is gone.
func TestAnnouncedCoordinatorExitsWhenIdle(t *testing.T) {
	b := buildCoordinator(t)
	cmd := exec.Command(b, "--announce", "--idle_exit_seconds", "0.2", "--first_client_timeout_seconds", "30")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make([]byte, 128)
	n, _ := out.Read(line)
	addr, ok := strings.CutPrefix(strings.TrimSpace(string(line[:n])), "listening on ")
	if !ok {
		t.Fatalf("announcement: %q", line[:n])
	}
	t.Setenv("MC_PG_COORDINATOR", addr)
	rt := backend.NewRuntime()
	found(t, []*backend.Runtime{rt}, "solo", backend.NewMemStore())[0].Close()
	rt.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the coordinator did not exit once its client was gone")
	}
}
