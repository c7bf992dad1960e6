// Package testutil holds helpers shared by tests across the module: it
// starts the real services (etcd) that tests run against.
package testutil

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// etcdReadyTimeout bounds how long StartEtcd waits for etcd to serve.
const etcdReadyTimeout = 10 * time.Second

// StartEtcd starts a single-member etcd on free loopback ports with a
// temporary data directory, waits until it is healthy, and returns its
// client endpoint ("http://127.0.0.1:PORT"). The process is killed and
// reaped in t.Cleanup. The test is skipped when no etcd binary is on PATH
// (Debian: apt-get install etcd-server). flags are added to etcd's
// command line (such as "--max-request-bytes=65536").
func StartEtcd(t testing.TB, flags ...string) string {
	t.Helper()
	return startEtcd(t, "http", &http.Client{Timeout: time.Second}, flags)
}

// StartEtcdTLS is StartEtcd serving clients mutual TLS with p's server
// pair and CA; it returns "https://127.0.0.1:PORT".
func StartEtcdTLS(t testing.TB, p *PKI, flags ...string) string {
	t.Helper()
	cfg, err := p.Client().Client()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	return startEtcd(t, "https", hc, append([]string{"--cert-file", p.ServerCert, "--key-file", p.ServerKey,
		"--trusted-ca-file", p.CA, "--client-cert-auth"}, flags...))
}

func startEtcd(t testing.TB, scheme string, hc *http.Client, flags []string) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd not found on PATH; install it (Debian: apt-get install etcd-server) to run this test")
	}
	ports := FreePorts(t, 2)
	client := fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	dataDir := t.TempDir()

	args := append([]string{
		"--name", "default",
		"--data-dir", dataDir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default=" + peer,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "mooncake-test",
	}, flags...)
	startService(t, "etcd at "+client, bin, args, etcdReadyTimeout, func() error { return etcdHealthy(hc, client) })
	return client
}

// etcdHealthy asks etcd's /health whether it has a leader.
func etcdHealthy(hc *http.Client, client string) error {
	resp, err := hc.Get(client + "/health")
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"true"`) {
		return nil
	}
	return fmt.Errorf("health: %d %s", resp.StatusCode, bytes.TrimSpace(b))
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1. They
// are held open together while being chosen and then released, so another
// process may still take one before the caller binds it.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// syncBuffer is a goroutine-safe output sink for a child process.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// tail returns at most the last n bytes written.
func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.Bytes()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return string(s)
}
