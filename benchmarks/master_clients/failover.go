package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// failoverResult is one row's failover: from kill -9 of the leader to the
// probe's first put that succeeded, and to each client's first heartbeat
// answered by the new leader (its segment remounted, for a storage client).
type failoverResult struct {
	row
	firstPut       time.Duration
	back50, back99 time.Duration
	backMax        time.Duration
	notBack        int
	load           string
}

var failoverFields = []string{"storage", "pure", "lease_s", "first_put_ms", "back_p50_ms", "back_p99_ms", "back_max_ms", "not_back", "load"}

func (r failoverResult) String() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 0, 64) }
	return fmt.Sprintf("%5d+%-6d  %14s  %24s  %8d  %s", r.storage, r.pure, ms(r.firstPut),
		ms(r.back50)+"/"+ms(r.back99)+"/"+ms(r.backMax), r.notBack, r.load)
}

func (r failoverResult) record(lease int) []string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
	return []string{strconv.Itoa(r.storage), strconv.Itoa(r.pure), strconv.Itoa(lease), ms(r.firstPut),
		ms(r.back50), ms(r.back99), ms(r.backMax), strconv.Itoa(r.notBack), r.load}
}

// measureFailover runs row r against two masters electing their leader on
// an etcd of their own (--enable_ha, --master_view_lease_ttl_sec=lease,
// no oplog), kills the leader with SIGKILL once every client heartbeats,
// and waits until every client is back or the deadline passes.
func measureFailover(bin, etcdBin string, r row, lease int) (failoverResult, error) {
	dir, err := os.MkdirTemp("", "master_clients_etcd")
	if err != nil {
		return failoverResult{}, err
	}
	defer os.RemoveAll(dir)
	etcdAddr, stopEtcd, err := startEtcd(etcdBin, dir)
	if err != nil {
		return failoverResult{}, err
	}
	defer stopEtcd()
	ha := []string{"--enable_ha", "--etcd_endpoints=" + etcdAddr, fmt.Sprintf("--master_view_lease_ttl_sec=%d", lease)}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return failoverResult{}, err
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	view := followView(ctx, cli)

	first, err := startMaster(bin, ha...)
	if err != nil {
		return failoverResult{}, err
	}
	defer first.stop()
	if err := waitFor(30*time.Second, func() bool { return view.get() == first.addr && role(first.admin) == "leader" }); err != nil {
		return failoverResult{}, fmt.Errorf("the first master did not lead: %w", err)
	}
	second, err := startMaster(bin, ha...)
	if err != nil {
		return failoverResult{}, err
	}
	defer second.stop()
	if err := waitFor(30*time.Second, func() bool { return role(second.admin) == "standby" }); err != nil {
		return failoverResult{}, fmt.Errorf("the second master did not stand by: %w", err)
	}

	clients, err := dialClients(first.addr, r)
	defer closeClients(clients)
	if err != nil {
		return failoverResult{}, err
	}
	beats := startHeartbeats(ctx, clients, view)
	defer func() { cancel(); beats.wait() }()
	probe, err := dialClient(first.addr)
	if err != nil {
		return failoverResult{}, fmt.Errorf("probe: %w", err)
	}
	defer probe.close()
	time.Sleep(2 * heartbeat) // every client is on its schedule
	if f := beats.failures.Load(); f > 0 {
		return failoverResult{}, fmt.Errorf("%d pings failed before the kill: %v", f, beats.firstError())
	}

	kill := time.Now()
	beats.since.Store(kill.UnixNano())
	first.cmd.Process.Signal(syscall.SIGKILL)
	firstPut, err := putUntilServed(probe, view, kill, time.Duration(4*lease)*time.Second+30*time.Second)
	if err != nil {
		return failoverResult{}, err
	}
	deadline := kill.Add(time.Duration(4*lease)*time.Second + 30*time.Second)
	for time.Now().Before(deadline) {
		if _, missing := beats.backTimes(); missing == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	times, missing := beats.backTimes()
	res := failoverResult{row: r, firstPut: firstPut, notBack: missing, load: loadAverage()}
	if n := len(times); n > 0 {
		res.back50, res.back99, res.backMax = times[n/2], times[(n-1)*99/100], times[n-1]
	}
	return res, nil
}

// putUntilServed puts a new 4 KiB object every 10 ms, following the
// leader, until one put started after kill succeeds, and returns how long
// after kill it ended.
func putUntilServed(c *client, view *leaderView, kill time.Time, limit time.Duration) (time.Duration, error) {
	for i := 0; time.Since(kill) < limit; i++ {
		c.follow(view) // a failed redial fails the put below
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.put(ctx, fmt.Sprintf("failover-%d", i))
		cancel()
		if err == nil {
			return time.Since(kill), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("no put succeeded within %v of the kill", limit)
}

// leaderView is the master view (the leader's address) as an etcd watch
// last saw it.
type leaderView struct{ addr atomic.Pointer[string] }

func (v *leaderView) get() string {
	if p := v.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// followView keeps a leaderView current from the master view key of the
// default cluster until ctx ends.
func followView(ctx context.Context, cli *clientv3.Client) *leaderView {
	v := &leaderView{}
	key := replication.MasterViewKey("")
	set := func(b []byte) { s := string(b); v.addr.Store(&s) }
	go func() {
		for ctx.Err() == nil {
			if resp, err := cli.Get(ctx, key); err == nil && len(resp.Kvs) > 0 {
				set(resp.Kvs[0].Value)
			}
			for wr := range cli.Watch(ctx, key) {
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypePut {
						set(ev.Kv.Value)
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return v
}

// role is what the master's admin endpoint says it is ("leader",
// "standby"), "" when it does not answer.
func role(admin string) string {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + admin + "/role")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

func waitFor(limit time.Duration, ok func() bool) error {
	for deadline := time.Now().Add(limit); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
	}
	return nil
}

// startEtcd starts an etcd with its data under dir on loopback ports of
// its own; stop kills it.
func startEtcd(bin, dir string) (addr string, stop func(), err error) {
	client, err := freePort()
	if err != nil {
		return "", nil, err
	}
	peer, err := freePort()
	if err != nil {
		return "", nil, err
	}
	curl, purl := fmt.Sprintf("http://127.0.0.1:%d", client), fmt.Sprintf("http://127.0.0.1:%d", peer)
	cmd := exec.Command(bin, "--name", "mc", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", curl, "--advertise-client-urls", curl,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl, "--initial-cluster", "mc="+purl,
		"--election-timeout", "500", "--heartbeat-interval", "50", "--log-level", "error")
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("etcd: %w", err)
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	health := func() bool {
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get(curl + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"true"`)
	}
	if err := waitFor(30*time.Second, health); err != nil {
		stop()
		return "", nil, errors.New("etcd did not become healthy within 30 s")
	}
	return fmt.Sprintf("127.0.0.1:%d", client), stop, nil
}
