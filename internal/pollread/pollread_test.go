package pollread

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// loopback listens on loopback, runs dial with the address, and returns
// the accepted end.
func loopback(t *testing.T, dial func(addr string) error) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := dial(ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pair returns the two ends of a loopback TCP connection.
func pair(t *testing.T) (client *net.TCPConn, server net.Conn) {
	t.Helper()
	var c net.Conn
	s := loopback(t, func(addr string) (err error) {
		c, err = net.Dial("tcp", addr)
		return err
	})
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn), s
}

// Reads return what the peer sent, io.EOF once it hung up, and end with
// the deadline's, the context's or Stop's error while nothing comes.
func TestReader(t *testing.T) {
	c, s := pair(t)
	r, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	go s.Write([]byte("hello"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v", buf, err)
	}

	r.SetDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := r.Read(buf); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	r.SetDeadline(time.Time{})

	ctx, cancel := context.WithCancel(context.Background())
	r.SetContext(ctx)
	cancel()
	if _, err := r.Read(buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("read with a cancelled context: %v", err)
	}
	r.SetContext(context.Background())

	done := make(chan error, 1)
	go func() {
		_, err := r.Read(buf)
		done <- err
	}()
	r.Stop()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read stopped: %v", err)
	}

	c2, s2 := pair(t)
	r2, err := New(c2)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if _, err := r2.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer hung up: %v", err)
	}
}

// A spinning read takes bytes that come during the spin, and the spin
// gives way to the deadline and to Stop.
func TestReaderSpin(t *testing.T) {
	c, s := pair(t)
	r, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	r.SetSpin(time.Minute)
	go func() {
		time.Sleep(10 * time.Millisecond)
		s.Write([]byte("late"))
	}()
	b := make([]byte, 4)
	if _, err := io.ReadFull(r, b); err != nil || string(b) != "late" {
		t.Fatalf("read during the spin = %q, %v", b, err)
	}
	r.SetDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := r.Read(b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("spinning read past its deadline = %v; want DeadlineExceeded", err)
	}
	r.SetDeadline(time.Time{})
	go func() {
		time.Sleep(10 * time.Millisecond)
		r.Stop()
	}()
	if _, err := r.Read(b); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("spinning read at Stop = %v; want net.ErrClosed", err)
	}
}
