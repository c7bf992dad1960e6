package tlsconf_test

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

func TestNothingSetMeansNoTLS(t *testing.T) {
	t.Setenv("MC_TLS_CERT_FILE", "")
	t.Setenv("MC_TLS_KEY_FILE", "")
	t.Setenv("MC_TLS_CA_FILE", "")
	f := tlsconf.FromEnv()
	if f.Enabled() {
		t.Fatalf("%+v is enabled", f)
	}
	if s, err := f.Server(); s != nil || err != nil {
		t.Fatalf("Server() = %v, %v", s, err)
	}
	if c, err := f.Client(); c != nil || err != nil {
		t.Fatalf("Client() = %v, %v", c, err)
	}
}

func TestHalfAConfigurationIsAnError(t *testing.T) {
	pki := testutil.NewPKI(t)
	for _, c := range []struct {
		f      tlsconf.Files
		server string // "" : no error
		client string
	}{
		{tlsconf.Files{CertFile: pki.ServerCert}, "without its key file", "without its key file"},
		{tlsconf.Files{KeyFile: pki.ServerKey}, "without its certificate file", "without its certificate file"},
		{tlsconf.Files{CAFile: pki.CA}, "needs a certificate and key", ""},
		{tlsconf.Files{CertFile: pki.ServerCert, KeyFile: pki.ClientKey}, "load certificate", "load certificate"},
		{tlsconf.Files{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.Dir + "/missing.pem"}, "read CA file", "read CA file"},
		{tlsconf.Files{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.ServerKey}, "holds no PEM certificate", "holds no PEM certificate"},
	} {
		_, err := c.f.Server()
		if (c.server == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.server)) {
			t.Errorf("%+v: Server() = %v, want %q", c.f, err, c.server)
		}
		_, err = c.f.Client()
		if (c.client == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.client)) {
			t.Errorf("%+v: Client() = %v, want %q", c.f, err, c.client)
		}
	}
}

func TestEnvironmentNamesTheFiles(t *testing.T) {
	pki := testutil.NewPKI(t)
	t.Setenv("MC_TLS_CERT_FILE", pki.ClientCert)
	t.Setenv("MC_TLS_KEY_FILE", pki.ClientKey)
	t.Setenv("MC_TLS_CA_FILE", pki.CA)
	if f := tlsconf.FromEnv(); f != pki.Client() {
		t.Fatalf("FromEnv() = %+v, want %+v", f, pki.Client())
	}
}

// handshake runs a TLS server with srv on loopback and a client with cli,
// and returns the error the client sees on its first exchange.
func handshake(t *testing.T, srv, cli tlsconf.Files) error {
	t.Helper()
	scfg, err := srv.Server()
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := cli.Client()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := tlsconf.Listen(raw, scfg)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err == nil {
			_, _ = c.Write(b)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tlsconf.Client(c, ccfg, ln.Addr().String())
	if _, err := tc.Write([]byte{7}); err != nil {
		return err
	}
	b := make([]byte, 1)
	_, err = io.ReadFull(tc, b)
	return err
}

func TestMutualTLSAdmitsOnlyTheCAsClients(t *testing.T) {
	pki := testutil.NewPKI(t)
	if err := handshake(t, pki.Server(true), pki.Client()); err != nil {
		t.Fatalf("client with the CA's certificate: %v", err)
	}
	if err := handshake(t, pki.Server(true), pki.Anonymous()); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if err := handshake(t, pki.Server(true), pki.Stranger()); err == nil {
		t.Fatal("a client whose certificate another CA signed was served")
	}
	if err := handshake(t, pki.Server(false), pki.Anonymous()); err != nil {
		t.Fatalf("server-only TLS refused a client without a certificate: %v", err)
	}
	// A client that does not trust the server's CA refuses it.
	if err := handshake(t, pki.Server(false), tlsconf.Files{CAFile: pki.StrangerCert}); err == nil {
		t.Fatal("a client trusting another certificate accepted the server")
	}
}

func TestForEtcdFollowsTheEndpointsScheme(t *testing.T) {
	cfg := &tls.Config{ServerName: "x"}
	if got := tlsconf.ForEtcd(cfg, []string{"http://a:1", "b:2"}); got != nil {
		t.Fatalf("plain endpoints got %v", got)
	}
	if got := tlsconf.ForEtcd(cfg, []string{"https://a:1"}); got == nil || got.ServerName != "x" {
		t.Fatalf("https endpoints got %v", got)
	}
	if got := tlsconf.ForEtcd(nil, []string{"https://a:1"}); got == nil {
		t.Fatal("https endpoints without files got no TLS")
	}
}
