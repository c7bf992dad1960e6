package main

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestSocketListenReceivesFromSocketSend: socket --listen says where it
// listens and counts what a separate socket-send writes to it.
func TestSocketListenReceivesFromSocketSend(t *testing.T) {
	pr, pw := io.Pipe()
	type out struct {
		r   result
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := measureSocket(1<<16, 2, 1<<20, 300*time.Millisecond, false, "127.0.0.1:0", pw)
		done <- out{r, err}
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening ") {
		t.Fatalf("first stderr line %q, %v", line, err)
	}
	go io.Copy(io.Discard, pr)
	addr := strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	if err := runSender(addr, 1<<16, 2, 1<<20, 300*time.Millisecond); err != nil {
		t.Fatalf("socket-send: %v", err)
	}
	got := <-done
	if got.err != nil {
		t.Fatalf("socket --listen: %v", got.err)
	}
	if got.r.Kind != "socket" || got.r.Streams != 2 || got.r.Bytes == 0 || got.r.GBps <= 0 {
		t.Fatalf("result %+v", got.r)
	}
}

// TestRoundTrips: rtt against answerRoundTrips gets every byte back and
// reports ordered percentiles.
func TestRoundTrips(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- answerRoundTrips(ln, 4096) }()
	r, err := measureRoundTrips(ln.Addr().String(), 4096, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	<-served
	if r.Kind != "rtt" || r.RoundTrip == 0 || r.Bytes != uint64(2*4096*r.RoundTrip) {
		t.Fatalf("result %+v", r)
	}
	if r.P50us <= 0 || r.P99us < r.P50us {
		t.Fatalf("percentiles p50 %v p99 %v", r.P50us, r.P99us)
	}
}
