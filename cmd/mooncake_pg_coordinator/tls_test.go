package main

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend"
	"github.com/mooncake-go/mooncake/backend/coordpb"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

// joinWith founds a group of one at the coordinator at addr with a client
// of files and returns the call's error.
func joinWith(t *testing.T, files tlsconf.Files, addr string) error {
	t.Helper()
	cfg, err := files.Client()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, tlsconf.DialOption(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = coordpb.NewCoordinatorClient(conn).Join(ctx, &coordpb.JoinRequest{GroupId: "g-" + t.Name(), Rank: 0, Size: 1,
		Endpoint: &coordpb.Endpoint{Segment: "s"}, Layout: "L"})
	return err
}

// setTLSEnv points MC_TLS_* at files.
func setTLSEnv(t *testing.T, f tlsconf.Files) {
	t.Setenv("MC_TLS_CERT_FILE", f.CertFile)
	t.Setenv("MC_TLS_KEY_FILE", f.KeyFile)
	t.Setenv("MC_TLS_CA_FILE", f.CAFile)
}

// An operator's coordinator with --tls_* serves mutual TLS: a rank with
// MC_TLS_* naming the CA's certificate founds a group through it; a plain
// client, one without a certificate and one with another CA's are refused.
func TestOperatorsCoordinatorServesMutualTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	b := buildCoordinator(t)
	cmd := exec.Command(b, "--host", "127.0.0.1", "--announce", "--idle_exit_seconds", "0", "--first_client_timeout_seconds", "0",
		"--tls_cert_file", pki.ServerCert, "--tls_key_file", pki.ServerKey, "--tls_ca_file", pki.CA)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make([]byte, 128)
	n, _ := out.Read(line)
	addr, ok := strings.CutPrefix(strings.TrimSpace(string(line[:n])), "listening on ")
	if !ok {
		t.Fatalf("announcement: %q", line[:n])
	}
	if err := joinWith(t, pki.Client(), addr); err != nil {
		t.Fatalf("client with the CA's certificate: %v", err)
	}
	for name, f := range map[string]tlsconf.Files{"plain": {}, "without a certificate": pki.Anonymous(), "another CA's": pki.Stranger()} {
		if err := joinWith(t, f, addr); err == nil {
			t.Errorf("%s client was served", name)
		}
	}

	setTLSEnv(t, pki.Client())
	t.Setenv("MC_PG_COORDINATOR", addr)
	rt := backend.NewRuntime()
	defer rt.Close()
	found(t, []*backend.Runtime{rt}, "solo", backend.NewMemStore())[0].Close()
}

// A coordinator that rank 0 starts as a process serves TLS with rank 0's
// MC_TLS_* files, and the ranks found their group through it.
func TestSpawnedCoordinatorTakesTheRanksTLSFiles(t *testing.T) {
	pki := testutil.NewPKI(t)
	b := buildCoordinator(t)
	// Every rank presents the server's pair: it is the coordinator's
	// certificate too, and the CA signed it for client use as well.
	setTLSEnv(t, pki.Server(true))
	rts := make([]*backend.Runtime, 2)
	for i := range rts {
		rts[i] = backend.NewRuntime()
		rts[i].SetCoordinatorBinary(b)
		defer rts[i].Close()
	}
	store := backend.NewMemStore()
	for _, g := range found(t, rts, "pair", store) {
		g.Close()
	}
	addr, err := store.Get(backend.CoordinatorKey, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Without the job's secret a client gets past TLS only to be refused
	// by the secret; a plain one does not get that far.
	if err := joinWith(t, pki.Client(), string(addr)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("client with the CA's certificate, without the job secret: %v, want Unauthenticated", err)
	}
	if err := joinWith(t, tlsconf.Files{}, string(addr)); status.Code(err) != codes.Unavailable {
		t.Fatalf("plain client: %v, want Unavailable (no TLS)", err)
	}
}
