package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/transfer/metadata"
)

// setTLSEnv points MC_TLS_* at files.
func setTLSEnv(t *testing.T, f tlsconf.Files) {
	t.Setenv("MC_TLS_CERT_FILE", f.CertFile)
	t.Setenv("MC_TLS_KEY_FILE", f.KeyFile)
	t.Setenv("MC_TLS_CA_FILE", f.CAFile)
}

// putThroughEngineClient writes and reads one key with the Transfer
// Engine's metadata client (configured by MC_TLS_*) at url.
func putThroughEngineClient(url string) error {
	c, err := metadata.ParseConn(url)
	if err != nil {
		return err
	}
	st, err := metadata.Open(c)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := st.Put(ctx, "mooncake/ram/tls", []byte(`{"name":"tls"}`)); err != nil {
		return err
	}
	v, err := st.Get(ctx, "mooncake/ram/tls")
	if err == nil && string(v) != `{"name":"tls"}` {
		err = fmt.Errorf("read back %q", v)
	}
	return err
}

// The standalone server with --tls_* serves mutual TLS: the engine's
// metadata client with MC_TLS_* set puts and gets; a plain client, one
// without a certificate and one with another CA's are refused.
func TestBinaryMutualTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	port := testutil.FreePorts(t, 1)[0]
	out, exited := startBinary(t, "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"--tls_cert_file", pki.ServerCert, "--tls_key_file", pki.ServerKey, "--tls_ca_file", pki.CA)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if code, _, err := testutil.HTTPGet(t, pki.Client(), "https://"+addr+"/health"); err == nil && code == 200 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("server exited: %v\n%s", err, out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("never healthy:\n%s", out)
		}
	}
	pki.CheckHTTPSRefusesStrangers(t, addr, "/health", true)

	url := "https://" + addr + "/metadata"
	setTLSEnv(t, pki.Client())
	if err := putThroughEngineClient(url); err != nil {
		t.Fatalf("engine metadata client with MC_TLS_*: %v", err)
	}
	for name, f := range map[string]tlsconf.Files{"without a certificate": pki.Anonymous(), "another CA's": pki.Stranger()} {
		setTLSEnv(t, f)
		if err := putThroughEngineClient(url); err == nil {
			t.Errorf("engine metadata client %s was served", name)
		}
	}
	setTLSEnv(t, tlsconf.Files{CertFile: pki.ClientCert})
	if err := putThroughEngineClient(url); err == nil || !strings.Contains(err.Error(), "without its key file") {
		t.Errorf("MC_TLS_CERT_FILE without MC_TLS_KEY_FILE: %v", err)
	}
	setTLSEnv(t, tlsconf.Files{})
	if err := putThroughEngineClient("http://" + addr + "/metadata"); err == nil {
		t.Error("a plain engine metadata client was served")
	}
}

// Half a TLS configuration stops the server at startup with exit 1.
func TestBinaryHalfTLSConfigurationFails(t *testing.T) {
	pki := testutil.NewPKI(t)
	out, err := command("--host", "127.0.0.1", "--port", "0", "--tls_cert_file", pki.ServerCert).CombinedOutput()
	if code := exitCode(t, err); code != 1 || !strings.Contains(string(out), "without its key file") {
		t.Fatalf("--tls_cert_file alone: exit %d, output:\n%s", code, out)
	}
}
