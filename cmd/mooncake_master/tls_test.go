package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// pingWith calls Ping on the master at addr over gRPC and over framed
// calls, each with a client of files, and returns their errors.
func pingWith(t *testing.T, files tlsconf.Files, addr string) (grpcErr, framedErr error) {
	t.Helper()
	cfg, err := files.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(addr, tlsconf.DialOption(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, grpcErr = masterpb.NewMasterClient(conn).Ping(ctx, &masterpb.PingRequest{ClientId: "probe"})
	fc, err := framedrpc.Dial(ctx, addr, framedrpc.Options{TLS: cfg})
	if err != nil {
		return grpcErr, err
	}
	defer fc.Close()
	_, framedErr = masterpb.NewMasterClient(fc).Ping(ctx, &masterpb.PingRequest{ClientId: "probe"})
	return grpcErr, framedErr
}

// A master with --tls_cert_file, --tls_key_file and --tls_ca_file serves
// mutual TLS on every listener: gRPC and framed calls on the RPC port, the
// admin endpoint and the embedded metadata store. A client with the CA's
// certificate is served; a plain client, one without a certificate and
// one whose certificate another CA signed are refused.
func TestBinaryMutualTLSOnEveryListener(t *testing.T) {
	pki := testutil.NewPKI(t)
	ports := testutil.FreePorts(t, 3)
	rpc := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p := startMaster(t, fmt.Sprintf("--rpc_port=%d", ports[0]), "--rpc_address=127.0.0.1",
		fmt.Sprintf("--metrics_port=%d", ports[1]), "--metrics_host=127.0.0.1",
		"--enable_http_metadata_server=true", fmt.Sprintf("--http_metadata_server_port=%d", ports[2]),
		"--http_metadata_server_host=127.0.0.1",
		"--tls_cert_file="+pki.ServerCert, "--tls_key_file="+pki.ServerKey, "--tls_ca_file="+pki.CA)
	waitTLS(t, p, pki, fmt.Sprintf("127.0.0.1:%d", ports[1]))

	if g, f := pingWith(t, pki.Client(), rpc); g != nil || f != nil {
		t.Fatalf("client with the certificate: gRPC %v, framed %v", g, f)
	}
	for name, files := range map[string]tlsconf.Files{"plain": {}, "without a certificate": pki.Anonymous(), "another CA's": pki.Stranger()} {
		if g, f := pingWith(t, files, rpc); g == nil || f == nil {
			t.Errorf("%s client: gRPC %v, framed %v; want both refused", name, g, f)
		}
	}
	pki.CheckHTTPSRefusesStrangers(t, fmt.Sprintf("127.0.0.1:%d", ports[1]), "/health", true)
	pki.CheckHTTPSRefusesStrangers(t, fmt.Sprintf("127.0.0.1:%d", ports[2]), "/health", true)
	if !strings.Contains(p.out.String(), "mutual_tls=true") {
		t.Errorf("the start log does not say mutual TLS is on:\n%s", p.out.String())
	}
}

// Without --tls_ca_file the master serves TLS to any client that
// verifies it, certificate or not; a plain client is still refused.
func TestBinaryServerOnlyTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	ports := testutil.FreePorts(t, 2)
	rpc := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p := startMaster(t, fmt.Sprintf("--rpc_port=%d", ports[0]), "--rpc_address=127.0.0.1",
		fmt.Sprintf("--metrics_port=%d", ports[1]), "--metrics_host=127.0.0.1",
		"--tls_cert_file="+pki.ServerCert, "--tls_key_file="+pki.ServerKey)
	waitTLS(t, p, pki, fmt.Sprintf("127.0.0.1:%d", ports[1]))
	if g, f := pingWith(t, pki.Anonymous(), rpc); g != nil || f != nil {
		t.Fatalf("client that trusts the CA: gRPC %v, framed %v", g, f)
	}
	if g, f := pingWith(t, tlsconf.Files{}, rpc); g == nil || f == nil {
		t.Fatalf("plain client: gRPC %v, framed %v; want both refused", g, f)
	}
	pki.CheckHTTPSRefusesStrangers(t, fmt.Sprintf("127.0.0.1:%d", ports[1]), "/health", false)
}

// Half a TLS configuration stops the master at startup with an error that
// names what is missing, instead of serving in clear.
func TestBinaryHalfTLSConfigurationFails(t *testing.T) {
	pki := testutil.NewPKI(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls_cert_file=" + pki.ServerCert}, "without its key file"},
		{[]string{"--tls_key_file=" + pki.ServerKey}, "without its certificate file"},
		{[]string{"--tls_ca_file=" + pki.CA}, "needs a certificate and key"},
		{[]string{"--tls_cert_file=" + pki.ServerCert, "--tls_key_file=" + pki.ClientKey}, "load certificate"},
		{[]string{"--tls_cert_file=" + pki.ServerCert, "--tls_key_file=" + pki.ServerKey, "--tls_ca_file=" + pki.ServerKey}, "holds no PEM certificate"},
	} {
		p := startMaster(t, append([]string{"--rpc_port=0", "--rpc_address=127.0.0.1", "--metrics_port=0"}, c.args...)...)
		select {
		case <-p.exited:
			var ee *exec.ExitError
			if !errors.As(p.err, &ee) || ee.ExitCode() != 1 || !strings.Contains(p.out.String(), c.want) {
				t.Errorf("%v: %v, want exit 1 saying %q:\n%s", c.args, p.err, c.want, p.out.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: the master started", c.args)
		}
	}
}

// waitTLS waits until the admin endpoint at addr answers a client with
// the PKI's certificate.
func waitTLS(t *testing.T, p *proc, pki *testutil.PKI, addr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if code, _, err := testutil.HTTPGet(t, pki.Client(), "https://"+addr+"/health"); err == nil && code == 200 {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("master exited: %v\n%s", p.err, p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("https://%s/health never answered", addr)
}

// An HA master with --tls_* and https:// etcd endpoints reaches an etcd
// that requires client certificates, is elected and serves (that etcd
// refuses clients without them: transfer/metadata's
// TestEtcdStoreOverMutualTLS).
func TestBinaryHAOverMutualTLSEtcd(t *testing.T) {
	pki := testutil.NewPKI(t)
	etcd := testutil.StartEtcdTLS(t, pki)
	ports := testutil.FreePorts(t, 2)
	rpc := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p := startMaster(t, "--enable_ha", "--etcd_endpoints", etcd, "--cluster_id=tls_test",
		fmt.Sprintf("--rpc_port=%d", ports[0]), "--rpc_address=127.0.0.1",
		fmt.Sprintf("--metrics_port=%d", ports[1]), "--metrics_host=127.0.0.1",
		"--tls_cert_file="+pki.ServerCert, "--tls_key_file="+pki.ServerKey, "--tls_ca_file="+pki.CA)
	waitTLS(t, p, pki, fmt.Sprintf("127.0.0.1:%d", ports[1]))
	deadline := time.Now().Add(20 * time.Second)
	for {
		g, _ := pingWith(t, pki.Client(), rpc)
		if g == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the master was never elected through the TLS etcd: %v\n%s", g, p.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
