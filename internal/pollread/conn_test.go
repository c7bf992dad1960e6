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

// dialPair returns a Conn dialled to a loopback listener, waiting as b
// says, and the accepted server end.
func dialPair(t *testing.T, b Busy) (*Conn, net.Conn) {
	t.Helper()
	var c *Conn
	s := loopback(t, func(addr string) (err error) {
		c, err = Dial(context.Background(), addr)
		return err
	})
	c.SetBusy(b)
	t.Cleanup(c.Release)
	return c, s
}

// busyWaits are the ways of waiting every Conn test runs with: sleeping in
// poll(2) at once, and spinning and yield-polling first.
var busyWaits = map[string]Busy{
	"sleep":      {},
	"spin+yield": {Spin: 50 * time.Microsecond, Yield: 2 * time.Millisecond},
	"yield":      {Yield: 200 * time.Microsecond},
}

// forEachBusy runs test once for each of busyWaits.
func forEachBusy(t *testing.T, test func(t *testing.T, b Busy)) {
	for name, b := range busyWaits {
		t.Run(name, func(t *testing.T) { test(t, b) })
	}
}

// A Conn carries bytes both ways, larger than the socket buffers (so that
// writes wait for room), and reports EOF once the peer hung up.
func TestConnCarriesBytesBothWays(t *testing.T) { forEachBusy(t, testConnCarriesBytesBothWays) }

func testConnCarriesBytesBothWays(t *testing.T, b Busy) {
	c, s := dialPair(t, b)
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
func TestConnDeadlineAndAbort(t *testing.T) { forEachBusy(t, testConnDeadlineAndAbort) }

func testConnDeadlineAndAbort(t *testing.T, b Busy) {
	c, _ := dialPair(t, b)
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

// Bytes that come while a read waits busily, and bytes that come after its
// busy budget (when it sleeps in poll), are all read, in order.
func TestConnReadsBytesDuringAndAfterTheBusyWait(t *testing.T) {
	forEachBusy(t, func(t *testing.T, b Busy) {
		c, s := dialPair(t, b)
		go func() {
			for i, gap := range []time.Duration{0, 0, 10 * time.Microsecond, 100 * time.Microsecond, 20 * time.Millisecond, 0} {
				time.Sleep(gap)
				if _, err := s.Write([]byte{byte('a' + i)}); err != nil {
					return
				}
			}
		}()
		got := make([]byte, 6)
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "abcdef" {
			t.Fatalf("read %q, %v; want abcdef", got, err)
		}
	})
}
