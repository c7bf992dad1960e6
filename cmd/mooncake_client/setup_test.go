package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/master"
)

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// metadataOnly runs a master service and returns its metadata URL; its
// RPC address is not handed out.
func metadataOnly(t *testing.T) string {
	t.Helper()
	svc, err := master.StartService(master.ServiceConfig{RPCAddress: "127.0.0.1:0", HTTPMetadataAddress: "127.0.0.1:0",
		Server: master.Options{Config: master.DefaultConfig()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return "http://" + svc.MetadataAddr() + "/metadata"
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestSetupFailuresThatAreRetried: an unreachable metadata server or
// master is worth retrying; a bad configuration is not.
func TestSetupFailuresThatAreRetried(t *testing.T) {
	meta := metadataOnly(t)
	for name, cfg := range map[string]client.Config{
		"metadata server down": {MetadataServer: "http://" + closedPort(t) + "/metadata", MasterServerAddr: closedPort(t)},
		"master down":          {MetadataServer: meta, MasterServerAddr: closedPort(t)},
	} {
		cfg.LocalHostname = "127.0.0.1"
		_, err := client.New(cfg)
		if err == nil || !retryable(err) {
			t.Errorf("%s: %v is not retried", name, err)
		}
	}
	_, err := client.New(client.Config{LocalHostname: "127.0.0.1", MetadataServer: meta, MasterServerAddr: closedPort(t), Protocol: "carrier-pigeon"})
	if err == nil || retryable(err) {
		t.Errorf("an unknown protocol: %v is retried", err)
	}
	if retryable(errors.New("no memory for the segment")) || !retryable(context.DeadlineExceeded) || !retryable(syscall.ECONNREFUSED) {
		t.Error("retryable misclassifies plain errors")
	}
}

// TestSetupStopsOnSignalWhileRetrying: a signal during the backoff ends
// setup with errStopped, which the daemon exits 0 on.
func TestSetupStopsOnSignalWhileRetrying(t *testing.T) {
	stop := make(chan os.Signal, 1)
	stop <- syscall.SIGTERM
	cfg := client.Config{LocalHostname: "127.0.0.1", MetadataServer: "http://" + closedPort(t) + "/metadata", MasterServerAddr: closedPort(t)}
	_, err := setupClient(cfg, 0, stop, quietLog())
	if !errors.As(err, new(errStopped)) {
		t.Fatalf("setup with SIGTERM pending: %v, want errStopped", err)
	}
	if err := run([]string{"--host=127.0.0.1", "--metadata_server=" + cfg.MetadataServer, "--master_server_address=" + cfg.MasterServerAddr,
		"--port=" + strings.Split(closedPort(t), ":")[1], "--global_segment_size=1MB"}, io.Discard, stopped()); err != nil {
		t.Fatalf("run stopped while retrying setup: %v, want nil (exit 0)", err)
	}
}

// stopped is a stop channel with a signal already in it.
func stopped() <-chan os.Signal {
	stop := make(chan os.Signal, 1)
	stop <- syscall.SIGINT
	return stop
}

// TestSetupTimeoutGivesUp: --setup_timeout bounds the retrying.
func TestSetupTimeoutGivesUp(t *testing.T) {
	cfg := client.Config{LocalHostname: "127.0.0.1", MetadataServer: "http://" + closedPort(t) + "/metadata", MasterServerAddr: closedPort(t)}
	_, err := setupClient(cfg, time.Second, make(chan os.Signal), quietLog())
	if err == nil || !strings.Contains(err.Error(), "--setup_timeout") || !retryable(err) {
		t.Fatalf("setup with a 1 s bound: %v, want it to give up", err)
	}
	if _, err := parse([]string{"--setup_timeout=-1"}, io.Discard); !errors.As(err, new(cli.UsageError)) {
		t.Fatalf("--setup_timeout=-1: %v, want a usage error", err)
	}
}

// TestRepeatedSetupFailuresHaveOneCause: two attempts against the same
// unreachable metadata server fail with different messages (each picks
// its own port) but one cause, so the retry loop logs it once per
// interval rather than on every attempt.
func TestRepeatedSetupFailuresHaveOneCause(t *testing.T) {
	meta := closedPort(t)
	cfg := client.Config{LocalHostname: "127.0.0.1", MetadataServer: "http://" + meta + "/metadata", MasterServerAddr: closedPort(t)}
	_, err1 := client.New(cfg)
	_, err2 := client.New(cfg)
	if err1 == nil || err2 == nil {
		t.Fatal("setup succeeded without a metadata server")
	}
	c1, c2 := failureCause(err1), failureCause(err2)
	if c1 != c2 || !strings.Contains(c1, meta) {
		t.Fatalf("causes %q and %q, want one naming %s", c1, c2, meta)
	}
	if got := failureCause(errors.Join(errors.New("a"), syscall.ECONNREFUSED)); got != syscall.ECONNREFUSED.Error() {
		t.Fatalf("cause of a joined error: %q", got)
	}
}
