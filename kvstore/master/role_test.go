package master

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// pausableProxy forwards TCP connections to target (an etcd client URL). While paused it
// moves no byte either way, as if the process behind it were stopped or
// cut off: what etcd sends it (watch events, lease answers) waits.
type pausableProxy struct {
	ln     net.Listener
	gate   sync.RWMutex // held for writing while paused
	mu     sync.Mutex
	paused bool
	conns  []net.Conn
}

func startPausableProxy(t *testing.T, target string) *pausableProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pausableProxy{ln: ln}
	target = strings.TrimPrefix(target, "http://")
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.resume()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(out, in) }()
			go func() { defer wg.Done(); p.pipe(in, out) }()
		}
	}()
	return p
}

// pipe copies src to dst, holding each chunk while paused.
func (p *pausableProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate.RLock()
			_, werr := dst.Write(buf[:n])
			p.gate.RUnlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *pausableProxy) addr() string { return "http://" + p.ln.Addr().String() }

func (p *pausableProxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.gate.Lock()
		p.paused = true
	}
}

func (p *pausableProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.gate.Unlock()
		p.paused = false
	}
}

// TestRoleIsNeverLeaderOnceDeposed: a leader reaches etcd through a
// proxy; the proxy is paused (the leader hears nothing from etcd, as if
// stopped), its lease is revoked and another master is elected. From then
// on the deposed master's GET /role must never say leader: not while it
// cannot hear etcd, and not after it can again, until it has stepped
// down. Its own lease would let it believe in its leadership for 30 s.
func TestRoleIsNeverLeaderOnceDeposed(t *testing.T) {
	for _, oplog := range []bool{false, true} {
		name := "without oplog"
		if oplog {
			name = "with oplog"
		}
		t.Run(name, func(t *testing.T) {
			ep := testutil.StartEtcd(t)
			cli := testutil.EtcdClient(t, ep)
			proxy := startPausableProxy(t, ep)
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			start := func(endpoint string, ttl int) *Service {
				svc, err := StartService(ServiceConfig{
					RPCAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0",
					Server: Options{Config: DefaultConfig()}, Logger: quiet,
					HA: &replication.HAConfig{Endpoints: []string{endpoint}, ClusterID: "role", LeaseTTL: ttl, Oplog: oplog},
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(svc.Close)
				return svc
			}
			hc := &http.Client{Timeout: 10 * time.Second}
			role := func(svc *Service) string {
				t.Helper()
				resp, err := hc.Get("http://" + svc.MetricsAddr() + "/role")
				if err != nil {
					t.Fatalf("GET /role: %v", err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return string(b)
			}
			a := start(proxy.addr(), 30)
			testutil.WaitUntil(t, 30*time.Second, "a to lead", func() bool { return role(a) == "leader" })
			b := start(ep, 0)

			proxy.pause()
			ctx := context.Background()
			view, err := cli.Get(ctx, replication.MasterViewKey("role"))
			if err != nil || len(view.Kvs) != 1 {
				t.Fatalf("master view: %v %v", view, err)
			}
			if _, err := cli.Revoke(ctx, clientv3.LeaseID(view.Kvs[0].Lease)); err != nil {
				t.Fatal(err)
			}
			testutil.WaitUntil(t, 30*time.Second, "b to lead", b.Server.IsLeader)
			if r := role(a); r == "leader" {
				t.Fatal("the deposed master, cut off from etcd, says leader after another was elected")
			}
			proxy.resume()
			for a.Server.IsLeader() {
				if r := role(a); r == "leader" {
					t.Fatal("the deposed master says leader after another was elected")
				}
			}
			if r := role(a); r != "standby" {
				t.Fatalf("the deposed master's role: %q", r)
			}
			if r := role(b); r != "leader" {
				t.Fatalf("the new leader's role: %q", r)
			}
		})
	}
}
