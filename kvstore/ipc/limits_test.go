package ipc

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// flood writes request frames on sock until the peer ends the connection
// (or n were written), reading nothing back; it closes the returned
// channel when it stops.
func flood(sock, n int) <-chan struct{} {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		frame := append(header(0, 4, 0), "ping"...)
		for i := 0; i < n; i++ {
			if _, err := unix.Write(sock, frame); err != nil {
				return // EPIPE, ECONNRESET: the server closed it
			}
		}
	}()
	return stopped
}

// waitFor polls cond until it holds, failing after 20 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAPeerThatReadsNoRepliesIsBoundedThenClosed(t *testing.T) {
	budget := NewBudget(0, 0)
	lim := Limits{MaxInFlight: 4, ReplyTimeout: 2 * time.Second, Shared: budget}
	// A well-behaved peer of the same "daemon", connected first so that
	// its goroutines are part of the baseline.
	good, _ := pairLimited(t, echo, lim)
	if _, err := good.Call(context.Background(), Message{Body: []byte("warm")}); err != nil {
		t.Fatal(err)
	}
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)

	raw, server := rawPairLimited(t, echo, lim)
	stopped := flood(raw, 1_000_000)
	// The server stops reading once its replies back up: its requests in
	// flight reach the limit and stay there, each a goroutine blocked
	// writing its reply.
	bound := goroutines + lim.MaxInFlight + 4
	waitFor(t, func() bool { return budget.Stats().InFlight == lim.MaxInFlight || runtime.NumGoroutine() > bound },
		"the hostile peer filling its limit")
	if g := runtime.NumGoroutine(); g > bound {
		t.Fatalf("%d goroutines with a peer that reads nothing (%d before it, limit %d in flight)", g, goroutines, lim.MaxInFlight)
	}
	// Meanwhile the well-behaved peer is served.
	if m, err := good.Call(context.Background(), Message{Body: []byte("hi")}); err != nil || string(m.Body) != "re:hi" {
		t.Fatalf("a well-behaved peer beside a stalled one: %q %v", m.Body, err)
	}
	// The stalled peer's connection is closed at the reply deadline,
	// which frees everything it held, while the test still holds its end.
	<-server.Done()
	<-stopped
	if !errors.Is(server.Err(), ErrReplyTimeout) {
		t.Fatalf("the stalled connection ended with %v", server.Err())
	}
	if st := budget.Stats(); st.ReplyTimeouts != 1 || st.Waits == 0 {
		t.Fatalf("counters %+v: want one reply timeout and some waits", st)
	}
	waitFor(t, func() bool {
		return budget.Stats().InFlight == 0 && runtime.NumGoroutine() <= goroutines+1 && openFDs(t) <= fds+1
	}, "goroutines and descriptors back once the stalled peer is gone") // +1: the test's own end
	if m, err := good.Call(context.Background(), Message{Body: []byte("again")}); err != nil || string(m.Body) != "re:again" {
		t.Fatalf("after the stalled peer: %q %v", m.Body, err)
	}
}

func TestTheSharedBudgetBoundsEveryConnectionTogether(t *testing.T) {
	budget := NewBudget(6, 0)
	lim := Limits{MaxInFlight: 4, ReplyTimeout: time.Hour, Shared: budget}
	goroutines := runtime.NumGoroutine()
	var servers []*Conn
	for range 3 {
		raw, server := rawPairLimited(t, echo, lim)
		flood(raw, 1_000_000)
		servers = append(servers, server)
	}
	bound := goroutines + 6 + 2*3 + 2
	// Until the replies fill the peers' sockets, requests still complete
	// and the count dips below 6 now and then: wait until it holds.
	full := func() bool {
		if budget.Stats().InFlight != 6 {
			return false
		}
		time.Sleep(50 * time.Millisecond)
		return budget.Stats().InFlight == 6
	}
	waitFor(t, func() bool { return full() || runtime.NumGoroutine() > bound },
		"three stalled peers filling the shared budget")
	if g := runtime.NumGoroutine(); g > bound {
		t.Fatalf("%d goroutines for three stalled peers (%d before, shared budget 6)", g, goroutines)
	}
	if st := budget.Stats(); st.InFlight != 6 || st.Waits == 0 {
		t.Fatalf("budget %+v: want 6 in flight and waits counted", st)
	}
	// Ending one stalled connection hands its requests to the others.
	servers[0].Close()
	waitFor(t, func() bool { return budget.Stats().InFlight == 6 }, "the budget taken up again by the others")
	servers[1].Close()
	servers[2].Close()
	waitFor(t, func() bool { return budget.Stats().InFlight == 0 && runtime.NumGoroutine() <= goroutines+3 },
		"everything given back")
}
