package rpcmsg

import (
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

func tlsClient(t *testing.T, f tlsconf.Files) *Client {
	t.Helper()
	cfg, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	c := NewClientTLS(1, 5*time.Second, cfg)
	t.Cleanup(c.Close)
	return c
}

// A server with mutual TLS queues the messages of a client with the CA's
// certificate, on one pooled connection, and refuses a plain client, one
// without a certificate and one whose certificate another CA signed.
func TestMutualTLSAdmitsOnlyTheCAsClients(t *testing.T) {
	pki := testutil.NewPKI(t)
	cfg, err := pki.Server(true).Server()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ListenConfig("127.0.0.1:0", Config{QueueLen: 4, TLS: cfg, IdleTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := tlsClient(t, pki.Client())
	for i := range 3 {
		if err := c.Send(s.Addr(), 1, []byte{byte(i)}); err != nil {
			t.Fatalf("send %d with the certificate: %v", i, err)
		}
		m, ok, _ := s.Next(5 * time.Second)
		if !ok || len(m.Data) != 1 || m.Data[0] != byte(i) {
			t.Fatalf("message %d: %+v %v", i, m, ok)
		}
	}
	if st := s.Stats(); st.Conns != 1 {
		t.Fatalf("%+v: three sends over TLS did not reuse one pooled connection", st)
	}
	for name, f := range map[string]tlsconf.Files{"plain": {}, "without a certificate": pki.Anonymous(), "another CA's": pki.Stranger()} {
		if err := tlsClient(t, f).Send(s.Addr(), 1, []byte("x")); err == nil {
			t.Errorf("%s client's message was queued", name)
		}
	}
	if m, ok, _ := s.Next(100 * time.Millisecond); ok {
		t.Fatalf("a refused client's message arrived: %+v", m)
	}
}

// A pooled TLS connection that the server closed as idle is not used
// again: the next send dials a new one and succeeds.
func TestAPooledTLSConnectionTheServerClosedIsNotUsed(t *testing.T) {
	pki := testutil.NewPKI(t)
	cfg, err := pki.Server(true).Server()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ListenConfig("127.0.0.1:0", Config{QueueLen: 4, TLS: cfg, IdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := tlsClient(t, pki.Client())
	for i := range 3 {
		if err := c.Send(s.Addr(), 1, []byte("x")); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if _, ok, _ := s.Next(5 * time.Second); !ok {
			t.Fatalf("message %d not queued", i)
		}
		want := uint64(i + 1)
		waitFor(t, func() bool { return s.Stats().IdleClosed == want }, "the pooled connection closed as idle")
	}
}
