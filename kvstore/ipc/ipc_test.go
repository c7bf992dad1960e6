package ipc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair returns two connected Conns; the server end answers with handler.
func pair(t *testing.T, handler Handler) (client, server *Conn) {
	t.Helper()
	return pairLimited(t, handler, Limits{})
}

// pairLimited is pair with the server end's Limits.
func pairLimited(t *testing.T, handler Handler, lim Limits) (client, server *Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprint("sock", i))
		nc, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		h := handler
		if i == 0 {
			h = nil
		}
		if conns[i], err = NewConnLimited(nc.(*net.UnixConn), h, lim); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { conns[0].Close(); conns[1].Close() })
	return conns[0], conns[1]
}

func echo(req Message) Message {
	closeFDs(req.FDs)
	return Message{Body: append([]byte("re:"), req.Body...)}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := make([]byte, headerSize)
	encodeHeader(h, &frame{id: 7, kind: kindResponse, body: make([]byte, 300), fds: []int{1, 2}})
	n, id, kind, nfds, err := decodeHeader(h)
	if err != nil || n != 300 || id != 7 || kind != kindResponse || nfds != 2 {
		t.Fatalf("decoded %d %d %d %d %v", n, id, kind, nfds, err)
	}
}

func TestHeaderRejectsMalformed(t *testing.T) {
	cases := map[string]func(h []byte){
		"oversized body": func(h []byte) { h[3] = 0xff },
		"unknown kind":   func(h []byte) { h[8] = 9 },
		"too many fds":   func(h []byte) { h[9] = maxFDs + 1 },
		"reserved bytes": func(h []byte) { h[11] = 1 },
	}
	for name, corrupt := range cases {
		h := make([]byte, headerSize)
		encodeHeader(h, &frame{id: 1, kind: kindRequest})
		corrupt(h)
		if _, _, _, _, err := decodeHeader(h); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: err %v, want ErrProtocol", name, err)
		}
	}
}

func TestCallsAreMultiplexed(t *testing.T) {
	c, _ := pair(t, echo)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := bytes.Repeat([]byte{byte(i)}, 1+i*1000) // some span several reads
			m, err := c.Call(context.Background(), Message{Body: body})
			if err != nil || !bytes.Equal(m.Body, append([]byte("re:"), body...)) {
				t.Errorf("call %d: %v (reply of %d bytes)", i, err, len(m.Body))
			}
		}()
	}
	wg.Wait()
}

func TestDescriptorTravelsWithItsFrame(t *testing.T) {
	c, _ := pair(t, func(req Message) Message {
		if len(req.FDs) != 1 {
			return Message{Body: []byte(fmt.Sprintf("fds=%d", len(req.FDs)))}
		}
		r, err := MapFD(req.FDs[0], 0, 4096, true)
		if err != nil {
			return Message{Body: []byte(err.Error())}
		}
		defer r.Close()
		out := append([]byte(nil), r.Mem[:len(req.Body)]...)
		copy(r.Mem, "written by the server")
		return Message{Body: out}
	})
	reg, err := NewRegion("ipc-test", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	copy(reg.Mem, "hello region")
	m, err := c.Call(context.Background(), Message{Body: []byte("hello region"), FDs: []int{reg.FD}})
	if err != nil || string(m.Body) != "hello region" {
		t.Fatalf("server read %q, %v", m.Body, err)
	}
	if !bytes.HasPrefix(reg.Mem, []byte("written by the server")) {
		t.Fatalf("the server's write is not visible through our mapping: %q", reg.Mem[:21])
	}
	// A frame without descriptors after one with: none are misattributed.
	if m, err = c.Call(context.Background(), Message{Body: []byte("x")}); err != nil || string(m.Body) != "fds=0" {
		t.Fatalf("second call: %q %v", m.Body, err)
	}
}

func TestReplyCarriesDescriptor(t *testing.T) {
	reg, err := NewRegion("ipc-reply", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	copy(reg.Mem[4096:], "second page")
	memfd := reg.FD
	c, _ := pair(t, func(req Message) Message {
		fd, _ := unix.Dup(memfd) // the connection closes what it sends
		return Message{Body: []byte("here"), FDs: []int{fd}}
	})
	m, err := c.Call(context.Background(), Message{})
	if err != nil || len(m.FDs) != 1 {
		t.Fatalf("reply %v fds %v", err, m.FDs)
	}
	view, err := MapFD(m.FDs[0], 4096, 11, false)
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	if string(view.Mem) != "second page" {
		t.Fatalf("mapped %q at an unaligned offset", view.Mem)
	}
}

func TestMapFDRejectsShortFile(t *testing.T) {
	reg, err := NewRegion("short", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	fd, _ := unix.Dup(reg.FD)
	if _, err := MapFD(fd, 0, 8192, false); err == nil {
		t.Fatal("mapping past the end of the file succeeded")
	}
	unix.Close(fd)
}

func TestPeerDeathFailsCallsInFlight(t *testing.T) {
	release := make(chan struct{})
	c, s := pair(t, func(req Message) Message { <-release; return Message{} })
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), Message{Body: []byte("waits")})
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let the request leave (not asserted)
	s.uc.Close()                      // the server end goes away without replying
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("call after peer death: %v, want ErrClosed", err)
	}
	close(release)
	<-c.Done()
	if _, err := c.Call(context.Background(), Message{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call on an ended connection: %v", err)
	}
}

func TestCallHonoursDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	c, _ := pair(t, func(req Message) Message { <-release; return Message{} })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Call(ctx, Message{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
}

func TestAbstractSocketListenDial(t *testing.T) {
	name := SocketName(os.Getpid()%30000 + 30000)
	ln, err := Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		uc, err := ln.AcceptUnix()
		if err == nil {
			NewConn(uc, echo)
		}
	}()
	uc, err := Dial(name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewConn(uc, nil)
	defer c.Close()
	if m, err := c.Call(context.Background(), Message{Body: []byte("a")}); err != nil || string(m.Body) != "re:a" {
		t.Fatalf("%q %v", m.Body, err)
	}
	if _, err := Dial(SocketName(1), 100*time.Millisecond); err == nil {
		t.Fatal("dialing a socket nobody listens on succeeded")
	}
}

func TestOversizedRequestLeavesTheConnectionUsable(t *testing.T) {
	c, _ := pair(t, echo)
	if _, err := c.Call(context.Background(), Message{Body: make([]byte, MaxBody+1)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized call: %v", err)
	}
	if m, err := c.Call(context.Background(), Message{Body: []byte("b")}); err != nil || string(m.Body) != "re:b" {
		t.Fatalf("call after a refused one: %q %v", m.Body, err)
	}
}
