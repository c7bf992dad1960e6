package main

import (
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master"
)

// The daemon's --tls_* flags reach the master: with the CA's client
// certificate it mounts its segment on a master that serves mutual TLS;
// half a pair is refused before anything is dialled.
func TestDaemonTLSFlags(t *testing.T) {
	for _, v := range []string{"MC_TLS_CERT_FILE", "MC_TLS_KEY_FILE", "MC_TLS_CA_FILE"} {
		t.Setenv(v, "") // run exports the flags; restored after the test
	}
	pki := testutil.NewPKI(t)
	srvTLS, err := pki.Server(true).Server()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := master.StartService(master.ServiceConfig{RPCAddress: "127.0.0.1:0", HTTPMetadataAddress: "127.0.0.1:0",
		Server: master.Options{Config: master.DefaultConfig()}, TLS: srvTLS, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	args := []string{"--host=127.0.0.1", "--metadata_server=https://" + svc.MetadataAddr() + "/metadata",
		"--master_server_address=" + svc.RPCAddr(), "--port=" + strings.Split(closedPort(t), ":")[1],
		"--global_segment_size=1MB", "--setup_timeout=10"}

	err = run(append(args, "--tls_cert_file="+pki.ClientCert, "--tls_ca_file="+pki.CA), io.Discard, make(chan os.Signal))
	if err == nil || !strings.Contains(err.Error(), "without its key file") {
		t.Fatalf("--tls_cert_file without --tls_key_file: %v", err)
	}

	stop := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(append(args, "--tls_cert_file="+pki.ClientCert, "--tls_key_file="+pki.ClientKey, "--tls_ca_file="+pki.CA),
			io.Discard, stop)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for svc.Server.Stats().CapacityBytes == 0 {
		select {
		case err := <-done:
			t.Fatalf("the daemon ended: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon never mounted its segment over TLS")
		}
	}
	stop <- syscall.SIGTERM
	if err := <-done; err != nil {
		t.Fatalf("daemon: %v", err)
	}
}
