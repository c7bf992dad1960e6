package rpcmsg

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestSendReceive(t *testing.T) {
	s, err := Listen("127.0.0.1:0", 16, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := NewClient(2, 5*time.Second)
	defer c.Close()
	payloads := [][]byte{{}, []byte("hello"), bytes.Repeat([]byte{7}, 1<<20)}
	var wg sync.WaitGroup
	for i, p := range payloads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Send(s.Addr(), byte(i+1), p); err != nil {
				t.Error(err)
			}
		}()
	}
	got := map[byte][]byte{}
	for range payloads {
		m, ok, err := s.Next(5 * time.Second)
		if !ok || err != nil {
			t.Fatalf("next: %v %v", ok, err)
		}
		if m.Source == "" {
			t.Fatal("no source address")
		}
		got[m.Kind] = m.Data
	}
	wg.Wait()
	for i, p := range payloads {
		if !bytes.Equal(got[byte(i+1)], p) {
			t.Fatalf("message %d: %d bytes, want %d", i, len(got[byte(i+1)]), len(p))
		}
	}
	// Connections are reused: a second round works on the pooled ones.
	if err := c.Send(s.Addr(), 9, []byte("again")); err != nil {
		t.Fatal(err)
	}
	if m, ok, _ := s.Next(5 * time.Second); !ok || string(m.Data) != "again" {
		t.Fatalf("second round: %v %q", ok, m.Data)
	}
}

func TestLimitsAndClose(t *testing.T) {
	s, err := Listen("127.0.0.1:0", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(1, 2*time.Second)
	defer c.Close()
	if err := c.Send(s.Addr(), 1, make([]byte, 11)); err == nil {
		t.Fatal("a message over the limit was accepted")
	}
	if _, ok, err := s.Next(10 * time.Millisecond); ok || err != nil {
		t.Fatalf("empty queue: %v %v", ok, err)
	}
	addr := s.Addr()
	s.Close()
	if _, _, err := s.Next(time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("next after close: %v", err)
	}
	if err := c.Send(addr, 1, []byte("x")); err == nil {
		t.Fatal("send to a closed server succeeded")
	}
}
