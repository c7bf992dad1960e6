package rpcmsg

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

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

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// dialFrom connects to addr from the loopback address src, so that one
// test plays peers on several hosts.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sendFrom delivers one message over a connection from src and returns
// the server's status.
func sendFrom(t *testing.T, src, addr string, data []byte) int32 {
	t.Helper()
	c := dialFrom(t, src, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write(encodeMessage(1, data)); err != nil {
		t.Fatal(err)
	}
	var st [4]byte
	if _, err := io.ReadFull(c, st[:]); err != nil {
		t.Fatalf("no status from the server for a peer at %s: %v", src, err)
	}
	return int32(binary.LittleEndian.Uint32(st[:]))
}

// closedByServer says whether the server ended c: a read sees the end of
// the stream (or a reset) before the deadline.
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !os.IsTimeout(err)
}

func TestIdlePeersAreCappedAndClosedWhileOthersAreServed(t *testing.T) {
	const perHost, hostile = 8, 20
	s, err := ListenConfig("127.0.0.1:0", Config{QueueLen: 4, IdleTimeout: 3 * time.Second, MaxConnsPerHost: perHost})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	wantMetrics(t, s, "mooncake_te_rpc_refused_connections_total 0", "mooncake_te_rpc_idle_closed_total 0")

	// One host opens more connections than it may hold; half send half a
	// header and then nothing, the others nothing at all.
	peers := make([]net.Conn, hostile)
	for i := range peers {
		peers[i] = dialFrom(t, "127.0.0.1", s.Addr())
		defer peers[i].Close()
		if i%2 == 0 {
			peers[i].Write([]byte{1, 0, 0, 0})
		}
	}
	waitFor(t, func() bool { st := s.Stats(); return st.Conns+int(st.Refused) == hostile }, "every connection accepted or refused")
	if st := s.Stats(); st.Conns != perHost || st.Refused != hostile-perHost {
		t.Fatalf("one host holds %d connections, %d refused; want %d held", st.Conns, st.Refused, perHost)
	}
	// Meanwhile a peer on another host is served.
	if st := sendFrom(t, "127.0.0.2", s.Addr(), []byte("hello")); st != 0 {
		t.Fatalf("status %d for a well-behaved peer", st)
	}
	if m, ok, err := s.Next(5 * time.Second); !ok || err != nil || string(m.Data) != "hello" {
		t.Fatalf("next: %q %v %v", m.Data, ok, err)
	}
	if st := s.Stats(); st.IdleClosed != 0 {
		t.Fatalf("idle peers closed before the well-behaved one was served (%+v): the check proves nothing", st)
	}
	// Every peer is closed by the server: the refused at once, the idle
	// ones at the deadline, while the test still holds its ends.
	for i, c := range peers {
		if !closedByServer(c) {
			t.Fatalf("peer %d still open", i)
		}
	}
	waitFor(t, func() bool {
		return s.Stats().Conns == 0 && runtime.NumGoroutine() <= goroutines && openFDs(t) <= fds+hostile
	}, "the server's goroutines and descriptors back")
	if st := s.Stats(); st.IdleClosed != perHost {
		t.Fatalf("%+v: want %d closed idle", st, perHost)
	}
	wantMetrics(t, s, fmt.Sprintf("mooncake_te_rpc_refused_connections_total %d", hostile-perHost),
		fmt.Sprintf("mooncake_te_rpc_idle_closed_total %d", perHost), "mooncake_te_rpc_connections 0")
	if st := sendFrom(t, "127.0.0.1", s.Addr(), []byte("again")); st != 0 {
		t.Fatalf("status %d after the idle peers went", st)
	}
}

func TestTheServerHoldsAtMostMaxConns(t *testing.T) {
	s, err := ListenConfig("127.0.0.1:0", Config{QueueLen: 4, IdleTimeout: time.Hour, MaxConns: 6, MaxConnsPerHost: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, src := range []string{"127.0.0.3", "127.0.0.3", "127.0.0.3", "127.0.0.4", "127.0.0.4", "127.0.0.4", "127.0.0.5"} {
		c := dialFrom(t, src, s.Addr())
		defer c.Close()
	}
	waitFor(t, func() bool { st := s.Stats(); return st.Conns+int(st.Refused) == 7 }, "every connection accepted or refused")
	if st := s.Stats(); st.Conns != 6 || st.Refused != 1 {
		t.Fatalf("%+v: want 6 held and 1 refused", st)
	}
}

func TestAPooledConnectionTheServerClosedIsNotUsed(t *testing.T) {
	s, err := ListenConfig("127.0.0.1:0", Config{QueueLen: 4, IdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := NewClient(1, 5*time.Second)
	defer c.Close()
	for i := range 3 {
		if err := c.Send(s.Addr(), 1, []byte("x")); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if _, ok, _ := s.Next(5 * time.Second); !ok {
			t.Fatalf("message %d not queued", i)
		}
		// The pooled connection goes idle and the server closes it.
		want := uint64(i + 1)
		waitFor(t, func() bool { return s.Stats().IdleClosed == want }, "the pooled connection closed as idle")
	}
}

// wantMetrics fails unless the server's metrics text has each line.
func wantMetrics(t *testing.T, s *Server, lines ...string) {
	t.Helper()
	text := s.MetricsText()
	for _, l := range lines {
		if !slices.Contains(strings.Split(text, "\n"), l) {
			t.Fatalf("metrics lack %q:\n%s", l, text)
		}
	}
}
