package pollread

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// dialPair returns a Conn dialled to a loopback listener and the accepted
// server end.
func dialPair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	var c *Conn
	s := loopback(t, func(addr string) (err error) {
		c, err = Dial(context.Background(), addr)
		return err
	})
	t.Cleanup(c.Release)
	return c, s
}

// A Conn carries bytes both ways, larger than the socket buffers (so that
// writes wait for room), and reports EOF once the peer hung up.
func TestConnCarriesBytesBothWays(t *testing.T) {
	c, s := dialPair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(big))
		_, err := io.ReadFull(s, b)
		if err != nil {
			b = nil
		}
		got <- b
		s.Write([]byte("pong"))
		s.Close()
	}()
	if n, err := c.Write(big); err != nil || n != len(big) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatal("the peer did not receive the bytes written")
	}
	reply := make([]byte, 4)
	if _, err := io.ReadFull(c, reply); err != nil || string(reply) != "pong" {
		t.Fatalf("reply = %q, %v", reply, err)
	}
	if _, err := c.Read(reply); !errors.Is(err, io.EOF) {
		t.Fatalf("Read after the peer hung up = %v; want EOF", err)
	}
}

// A read waiting for bytes ends with the context's deadline, and Abort
// from another goroutine ends a read in progress and every later call
// with net.ErrClosed.
func TestConnDeadlineAndAbort(t *testing.T) {
	c, _ := dialPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	c.SetContext(ctx)
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v; want DeadlineExceeded", err)
	}
	c.SetContext(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read reach poll(2)
	c.Abort()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read at Abort = %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Abort did not end the read in progress")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Abort = %v; want net.ErrClosed", err)
	}
}
