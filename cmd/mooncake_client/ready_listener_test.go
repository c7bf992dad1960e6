package main

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestReadyAddress(t *testing.T) {
	for host, want := range map[string]string{
		"0.0.0.0": "127.0.0.1:50052", "": "127.0.0.1:50052", "::": "127.0.0.1:50052",
		"127.0.0.1": "127.0.0.1:50052", "10.1.2.3": "10.1.2.3:50052", "10.1.2.3:13000": "10.1.2.3:50052",
		"::1": "[::1]:50052", "localhost": "localhost:50052",
	} {
		if got := readyAddress(host, 50052); got != want {
			t.Errorf("readyAddress(%q) = %s, want %s", host, got, want)
		}
	}
}

// TestReadyListenerAcceptsAndCloses: a peer of the TCP port is accepted
// and closed at once: what it sends is never read, nothing is answered.
func TestReadyListenerAcceptsAndCloses(t *testing.T) {
	r, err := listenReady("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c, err := net.Dial("tcp", r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("put key value\n"))
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if len(b) != 0 || (err != nil && !isReset(err)) {
			t.Fatalf("read %q, %v; want the connection closed with nothing sent", b, err)
		}
	}
	addr := r.Addr()
	r.Close()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the port still accepts after Close")
	}
}

// isReset: closing a connection with unread bytes resets it.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
