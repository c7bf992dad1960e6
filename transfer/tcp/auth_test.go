package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

var testSecret = []byte("cluster-secret-0123456789abcdef")

// exchange runs the initiator's side with initSecret against the
// target's with targetSecret over a pipe and returns both results.
func exchange(initSecret, targetSecret []byte) (initErr, targetErr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		targetErr = authTarget(b, b, targetSecret)
		b.Close()
	}()
	initErr = authInitiator(a, a, initSecret)
	a.Close()
	wg.Wait()
	return initErr, targetErr
}

// Both sides pass with the same secret; with different secrets both
// fail: the initiator already at the target's MAC, so it never sends its
// own, and the target sees the connection end before any request.
func TestAuthExchange(t *testing.T) {
	if ie, te := exchange(testSecret, testSecret); ie != nil || te != nil {
		t.Fatalf("same secret: initiator %v, target %v", ie, te)
	}
	ie, te := exchange([]byte("another-secret-0123456789abcdef"), testSecret)
	if !errors.Is(ie, errAuth) || te == nil {
		t.Fatalf("different secrets: initiator %v, target %v", ie, te)
	}
}

// A peer that replays a recorded exchange does not pass: the target's
// fresh nonce makes the recorded MAC wrong.
func TestAuthReplayFails(t *testing.T) {
	a, b := net.Pipe()
	var rec bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- authTarget(b, b, testSecret); b.Close() }()
	if err := authInitiator(a, io.MultiWriter(a, &rec), testSecret); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	recorded := rec.Bytes() // the hello and the initiator's MAC
	a2, b2 := net.Pipe()
	defer a2.Close()
	go func() { done <- authTarget(b2, b2, testSecret); b2.Close() }()
	a2.SetDeadline(time.Now().Add(5 * time.Second))
	go io.Copy(io.Discard, a2)
	a2.Write(recorded)
	if err := <-done; !errors.Is(err, errAuth) {
		t.Fatalf("a replayed exchange: %v, want refused", err)
	}
}

// A target with a secret serves nothing to a peer that sends requests
// without the exchange: its memory is neither written nor read, and the
// connection is counted as refused. The same requests after the
// exchange are served.
func TestServerWithSecretRefusesUnauthenticatedRequests(t *testing.T) {
	const page = 4096
	mem := make([]byte, page)
	for i := range mem {
		mem[i] = 0x5A
	}
	base := uint64(gpu.AddrOf(mem))
	srv := &Server{memory: &fakeExposed{base: base, n: page}, timeout: 2 * time.Second, secret: testSecret}
	write := func(authenticated bool) []byte {
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); srv.serveConn(b); b.Close() }()
		a.SetDeadline(time.Now().Add(5 * time.Second))
		if authenticated {
			if err := authInitiator(a, a, testSecret); err != nil {
				t.Fatal(err)
			}
		}
		var hb [tcpHeaderSize]byte
		tcpHeader{size: 5, addr: base, opcode: transport.OpWrite, v2: true}.encode(&hb)
		go func() { a.Write(append(hb[:], "hello"...)) }()
		var st [8]byte
		io.ReadFull(a, st[:])
		a.Close()
		<-done
		return st[:]
	}
	if st := write(false); !bytes.Equal(st, func() []byte { s := encodeStatus(statusRejected); return s[:] }()) {
		t.Fatalf("unauthenticated write answered %x, want REJECTED", st)
	}
	if !bytes.Equal(mem, bytes.Repeat([]byte{0x5A}, page)) || srv.Refused() != 1 {
		t.Fatalf("unauthenticated write: memory changed %v, refused %d", !bytes.Equal(mem, bytes.Repeat([]byte{0x5A}, page)), srv.Refused())
	}
	if st := write(true); !bytes.Equal(st, func() []byte { s := encodeStatus(statusOK); return s[:] }()) || string(mem[:5]) != "hello" {
		t.Fatalf("authenticated write answered %x, memory %q", st, mem[:5])
	}
}

// LoadSecret reads MC_TE_SECRET_FILE (refusing one other users can read)
// before MC_TE_SECRET, and refuses a short secret.
func TestLoadSecret(t *testing.T) {
	t.Setenv("MC_TE_SECRET_FILE", "")
	t.Setenv("MC_TE_SECRET", "")
	if s, err := LoadSecret(); s != nil || err != nil {
		t.Fatalf("unset: %q %v", s, err)
	}
	t.Setenv("MC_TE_SECRET", "short")
	if _, err := LoadSecret(); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
	t.Setenv("MC_TE_SECRET", string(testSecret))
	if s, err := LoadSecret(); err != nil || !bytes.Equal(s, testSecret) {
		t.Fatalf("MC_TE_SECRET: %q %v", s, err)
	}
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("  file-secret-0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MC_TE_SECRET_FILE", path)
	if _, err := LoadSecret(); err == nil {
		t.Fatal("a world-readable secret file was accepted")
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := LoadSecret(); err != nil || string(s) != "file-secret-0123456789abcdef" {
		t.Fatalf("MC_TE_SECRET_FILE: %q %v", s, err)
	}
}

// FuzzAuthTarget feeds arbitrary bytes, as a peer's side of the exchange
// and the requests after it, to a target with a secret: the peer does
// not hold the secret, so no request is served. The exposed buffer is
// never written, never read back to the peer, and the target sends at
// most its challenge and one status frame.
func FuzzAuthTarget(f *testing.F) {
	const page = 4096
	mem := make([]byte, page)
	base := uint64(gpu.AddrOf(mem))
	var hb [tcpHeaderSize]byte
	tcpHeader{size: 5, addr: base, opcode: transport.OpWrite, v2: true}.encode(&hb)
	hello := encodeHello(bytes.Repeat([]byte{7}, authNonceSize))
	f.Add(append(hb[:], "hello"...))
	f.Add(hello)
	f.Add(append(append(hello, bytes.Repeat([]byte{1}, authMACSize)...), append(hb[:], "hello"...)...))
	f.Add([]byte(authMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		for i := range mem {
			mem[i] = 0x5A
		}
		srv := &Server{memory: &fakeExposed{base: base, n: page}, timeout: time.Second, secret: testSecret}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() { defer close(done); srv.serveConn(server); server.Close() }()
		var out bytes.Buffer
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); io.Copy(&out, client) }()
		client.SetDeadline(time.Now().Add(5 * time.Second))
		client.Write(b)
		client.Close()
		<-done
		wg.Wait()
		if out.Len() > authNonceSize+authMACSize+8 {
			t.Fatalf("the target sent %d bytes to a peer without the secret", out.Len())
		}
		if !bytes.Equal(mem, bytes.Repeat([]byte{0x5A}, page)) {
			t.Fatal("a peer without the secret wrote the exposed buffer")
		}
	})
}

// FuzzParseHello: the hello parser never panics, and a hello it accepts
// is exactly the one its nonce encodes to.
func FuzzParseHello(f *testing.F) {
	f.Add(encodeHello(bytes.Repeat([]byte{3}, authNonceSize)))
	f.Add([]byte(authMagic))
	f.Add(make([]byte, authHelloSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := parseHello(b)
		if err != nil {
			return
		}
		if !bytes.Equal(encodeHello(n), b) {
			t.Fatalf("hello %x re-encodes as %x", b, encodeHello(n))
		}
	})
}

// BenchmarkDial measures what the secret adds to opening a data
// connection on loopback: a dial and the first request's status, without
// and with the exchange before it.
func BenchmarkDial(b *testing.B) {
	for _, tc := range []struct {
		name   string
		secret []byte
	}{{"plain", nil}, {"secret", testSecret}} {
		b.Run(tc.name, func(b *testing.B) {
			mem := make([]byte, 4096)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := NewServer(ln, &fakeExposed{base: uint64(gpu.AddrOf(mem)), n: 4096}, gpu.System(), 5*time.Second, tc.secret)
			go srv.Serve()
			defer srv.Close()
			p := newPeer(ln.Addr().String(), 1, gpu.System(), tc.secret, func() {})
			var hb [tcpHeaderSize]byte
			tcpHeader{size: 8, addr: uint64(gpu.AddrOf(mem)), opcode: transport.OpWrite, v2: true}.encode(&hb)
			req := append(hb[:], "8 bytes!"...)
			b.ResetTimer()
			for range b.N {
				c, st := p.dial(time.Now().Add(5*time.Second), false)
				if c == nil {
					b.Fatalf("dial: %v", st)
				}
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if st, err := c.readStatus(); st != transport.StatusCompleted {
					b.Fatalf("status %v: %v", st, err)
				}
				p.conns.Remove(c.Conn)
			}
		})
	}
}
