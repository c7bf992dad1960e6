package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
	"github.com/mooncake-go/mooncake/transfer/metaserver"
)

// reexecEnv makes the test binary run main() instead of the tests, so exit
// codes, signals and HA fail-over are checked on real processes.
const reexecEnv = "MOONCAKE_TEST_RUN_MASTER_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(storageEnv) == "1" {
		runStorage()
		return
	}
	testutil.RunTestsOrMain(m, reexecEnv, main)
}

func TestHelpListsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"--help"}, &out, nil); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help = %v", err)
	}
	fs := newFlagSet(&options{}, io.Discard)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(out.String(), "-"+f.Name+" ") && !strings.Contains(out.String(), "-"+f.Name+"\n") {
			t.Errorf("--help lacks %s", f.Name)
		}
	})
	for _, want := range []string{"rpc_port", "default_kv_lease_ttl", "eviction_high_watermark_ratio", "enable_ha",
		"etcd_endpoints", "cluster_id", "(default 50051)", "(default 10000)", "(default 9003)", "(default 8080)", "(default 0.9)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	if n < 25 {
		t.Fatalf("only %d flags", n)
	}
}

func TestBadArguments(t *testing.T) {
	t.Setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", "")
	for _, args := range [][]string{
		{"--nosuchflag"},
		{"--eviction_ratio=1.5"},
		{"--eviction_high_watermark_ratio", "-0.1"},
		{"--default_kv_lease_ttl=soon"},
		{"--rpc_port=70000"},
		{"--client_ttl=0"},
		{"--default_kv_soft_pin_ttl=2000", "--max_kv_soft_pin_ttl=1000"},
		{"--enable_ha"},
		{"--enable_ha", "--ha_backend_connstring=redis://h:1/0", "--ha_backend_type=redis"},
		{"--enable_ha", "--ha_backend_connstring=redis://h1:1;h2:2", "--ha_backend_type=redis"},
		{"--enable_ha", "--ha_backend_connstring=redis://h:1", "--ha_backend_type=redis", "--enable_oplog"},
		{"--enable_oplog"},
		{"--enable_ha", "--etcd_endpoints=x:1", "--enable_oplog", "--oplog_batch_max_entries=0"},
		{"--enable_ha", "--etcd_endpoints=x:1", "--enable_oplog", "--oplog_pipeline_depth=0"},
		{"--enable_ha", "--etcd_endpoints=x:1", "--master_view_lease_ttl_sec=0"},
		{"--enable_ha", "--etcd_endpoints=x:1", "--enable_oplog", "--enable_snapshot"}, // no MOONCAKE_SNAPSHOT_LOCAL_PATH
		{"--enable_ha", "--etcd_endpoints=x:1", "--enable_snapshot_restore"},           // no oplog
		{"--snapshot_object_store_type=s3"},
		{"--enable_ha", "--etcd_endpoints=x:1", "--enable_oplog", "--enable_snapshot", "--snapshot_object_store_type=s3"},
		{"--snapshot_object_store_type=redis"},
		{"--snapshot_interval_seconds=0"},
		{"--snapshot_retention_count=-1"},
		{"--memory_allocator=cachelib"},
		{"--logtostderr=false"},
		{"--rpc_thread_num=-1"},
		{"--max_threads=0"},
		{"--rpc_conn_timeout_seconds=-1"},
		{"--http_metadata_server_max_keys=-1"},
		{"--http_metadata_server_max_bytes=-1"},
		{"--root_fs_dir=relative"},
		{"--global_file_segment_size=0"},
		{"stray"},
	} {
		var out bytes.Buffer
		err := run(args, &out, nil)
		if !errors.As(err, new(cli.UsageError)) || out.Len() == 0 {
			t.Errorf("run(%q) = %v with output %q, want a usage error with a message", args, err, out.String())
		}
	}
}

func TestParseForms(t *testing.T) {
	t.Setenv("MC_STORE_CLUSTER_ID", "from_env")
	t.Setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", "/snapshots")
	for _, tc := range []struct {
		args  []string
		check func(o *options) bool
	}{
		{nil, func(o *options) bool {
			return o.rpcPort == 50051 && o.metricsPort == 9003 && o.cfg.DefaultLeaseTTL == 10*time.Second &&
				o.cfg.ClientTTL == 10*time.Second && o.cfg.ClientDeadTTL == 300*time.Second && o.clusterID == "from_env" && !o.enableHTTPMetadata
		}},
		{[]string{"--default_kv_lease_ttl=500"}, func(o *options) bool { return o.cfg.DefaultLeaseTTL == 500*time.Millisecond }},
		{[]string{"--default_kv_lease_ttl", "10s"}, func(o *options) bool { return o.cfg.DefaultLeaseTTL == 10*time.Second }},
		{[]string{"--default_kv_lease_ttl=1m"}, func(o *options) bool { return o.cfg.DefaultLeaseTTL == time.Minute }},
		{[]string{"--port", "1234"}, func(o *options) bool { return o.rpcPort == 1234 }},
		{[]string{"--port=2", "--rpc_port=1"}, func(o *options) bool { return o.rpcPort == 1 }},
		{[]string{"--enable_http_metadata_server=true", "--http_metadata_server_port", "18080"}, func(o *options) bool {
			return o.enableHTTPMetadata && o.httpMetadataPort == 18080
		}},
		{[]string{"--allow_evict_soft_pinned_objects=false", "--client_ttl", "60"}, func(o *options) bool {
			return !o.cfg.AllowEvictSoftPinned && o.cfg.ClientTTL == time.Minute
		}},
		{[]string{"--client_dead_ttl=2m"}, func(o *options) bool { return o.cfg.ClientDeadTTL == 2*time.Minute }},
		{[]string{"--enable_ha", "--etcd_endpoints=h1:2379;h2:2379", "--cluster_id=c"}, func(o *options) bool {
			return o.enableHA && o.haConnString == "h1:2379;h2:2379" && o.clusterID == "c"
		}},
		{[]string{"--enable_ha", "--ha_backend_connstring=h:1", "--enable_oplog", "--oplog_poll_interval_ms=50",
			"--oplog_batch_max_entries=10", "--batch_oplog_retry_timeout_sec=3"}, func(o *options) bool {
			return o.enableOplog && o.oplogPollMs == 50 && o.oplogBatchMax == 10 && o.oplogRetrySec == 3
		}},
		{nil, func(o *options) bool {
			return !o.enableOplog && o.haLease == replication.MasterViewLeaseTTL && o.oplogPipelineDepth == replication.DefaultOplogPipelineDepth
		}},
		{[]string{"--enable_ha", "--ha_backend_connstring=h:1", "--enable_oplog", "--oplog_pipeline_depth=2",
			"--master_view_lease_ttl_sec=1"}, func(o *options) bool {
			return o.oplogPipelineDepth == 2 && o.haLease == 1
		}},
		{[]string{"--enable_multi_tenants=true"}, func(o *options) bool { return o.cfg.MultiTenant }},
		{nil, func(o *options) bool {
			return !o.cfg.FS.Enabled() && o.cfg.FS.GlobalFileSegmentSize == math.MaxInt64 && o.cfg.FS.ClusterID == "from_env"
		}},
		{[]string{"--root_fs_dir=/mnt/3fs", "--cluster_id=c1", "--global_file_segment_size=1024"}, func(o *options) bool {
			return o.cfg.FS.Dir() == "/mnt/3fs/c1" && o.cfg.FS.GlobalFileSegmentSize == 1024
		}},
		{nil, func(o *options) bool { return o.rpcThreads == 16 && o.rpcConnTimeout == 0 && o.rpcNoDelay }},
		{[]string{"--rpc_conn_timeout_seconds=30", "--rpc_enable_tcp_no_delay=false"}, func(o *options) bool {
			return o.rpcConnTimeout == 30 && !o.rpcNoDelay
		}},
		{[]string{"--max_threads=2"}, func(o *options) bool { return o.rpcThreads == 2 }},
		{[]string{"--max_threads=2", "--rpc_thread_num=3"}, func(o *options) bool { return o.rpcThreads == 3 }},
		{nil, func(o *options) bool { return !o.cfg.MultiTenant && o.glogLevel == nil }},
		// glog's flags from upstream's launch scripts.
		{[]string{"--logtostderr", "--minloglevel=1"}, func(o *options) bool { return *o.glogLevel == slog.LevelWarn }},
		{[]string{"-v=1", "--alsologtostderr=true"}, func(o *options) bool { return *o.glogLevel == slog.LevelDebug }},
		{[]string{"--minloglevel", "2"}, func(o *options) bool { return *o.glogLevel == slog.LevelError }},
		{nil, func(o *options) bool { return o.snapshotConfig == nil && o.snapshot.interval == 600 }},
		{[]string{"--enable_ha", "--etcd_endpoints=x:1", "--enable_oplog", "--enable_snapshot", "--snapshot_interval_seconds=5",
			"--snapshot_retention_count=3", "--snapshot_object_store_type=local", "--enable_snapshot_restore"}, func(o *options) bool {
			c := o.snapshotConfig
			return c != nil && c.Enable && c.Restore && c.Interval == 5*time.Second && c.Retention == 3 && c.Dir == "/snapshots"
		}},
	} {
		o, err := parse(tc.args, io.Discard)
		if err != nil || !tc.check(o) {
			t.Errorf("parse(%q) = %+v, %v", tc.args, o, err)
		}
	}
}

// proc is a mooncake_master child process.
type proc struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
	err    error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startMaster(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], args...), out: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), reexecEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("master %v output:\n%s", args, p.out.String())
		}
	})
	return p
}

// waitHTTP polls url until it answers 200 and returns the body.
func waitHTTP(t *testing.T, p *proc, url string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return string(b)
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("master exited: %v\n%s", p.err, p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s never answered", url)
	return ""
}

func TestBinaryServesAndStopsOnSignal(t *testing.T) {
	ports := testutil.FreePorts(t, 3)
	p := startMaster(t, fmt.Sprintf("--rpc_port=%d", ports[0]), "--rpc_address=127.0.0.1",
		"--metrics_port", fmt.Sprint(ports[1]), "--metrics_host=127.0.0.1",
		"--enable_http_metadata_server=true", fmt.Sprintf("--http_metadata_server_port=%d", ports[2]),
		"--http_metadata_server_host=127.0.0.1", "--default_kv_lease_ttl=500", "--rpc_thread_num=1",
		"--rpc_conn_timeout_seconds=60", "--rpc_enable_tcp_no_delay=false")
	if body := waitHTTP(t, p, fmt.Sprintf("http://127.0.0.1:%d/health", ports[1])); body != "OK" {
		t.Fatalf("/health = %q", body)
	}
	m := waitHTTP(t, p, fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1]))
	for _, want := range []string{"master_total_capacity_bytes 0", "master_key_count 0", "master_put_start_requests_total 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	waitHTTP(t, p, fmt.Sprintf("http://127.0.0.1:%d/health", ports[2]))

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", ports[0]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := masterpb.NewMasterClient(conn)
	cl.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: "c", Segment: &masterpb.Segment{Id: "s", Name: "s", Base: 1 << 30, Size: 1 << 20}})
	cl.PutStart(ctx, &masterpb.PutStartRequest{ClientId: "c", Key: "k", Size: 10})
	cl.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "c", Key: "k"})
	g, err := cl.GetReplicaList(ctx, &masterpb.KeyRequest{Key: "k"})
	if err != nil || g.ErrorCode != 0 || g.LeaseTtlMs != 500 {
		t.Fatalf("GetReplicaList: %v %v", g, err)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", p.err, p.out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("master did not exit on SIGTERM")
	}
	for _, want := range []string{"mooncake_master starting", "default_kv_lease_ttl=500ms", "rpc_threads=1", "rpc_conn_timeout=1m0s",
		"rpc_enable_tcp_no_delay=false", "mooncake_master stopped"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

func TestBinaryEmbeddedMetadataStoreHoldsAtMostItsBudget(t *testing.T) {
	ports := testutil.FreePorts(t, 2)
	p := startMaster(t, fmt.Sprintf("--rpc_port=%d", ports[0]), "--rpc_address=127.0.0.1", "--metrics_port=0",
		"--enable_http_metadata_server=true", fmt.Sprintf("--http_metadata_server_port=%d", ports[1]),
		"--http_metadata_server_host=127.0.0.1", "--http_metadata_server_max_keys=4")
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	waitHTTP(t, p, base+"/health")
	put := func(key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, base+"/metadata?key="+key, strings.NewReader(`{"name":"x"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range 4 {
		if code, body := put(fmt.Sprint("k", i)); code != http.StatusOK {
			t.Fatalf("PUT %d: %d %q", i, code, body)
		}
	}
	for i := 4; i < 20; i++ {
		if code, body := put(fmt.Sprint("k", i)); code != http.StatusInsufficientStorage || !strings.Contains(body, "metadata store full") {
			t.Fatalf("PUT %d past --http_metadata_server_max_keys=4: %d %q", i, code, body)
		}
	}
	if code, body := put("k0"); code != http.StatusOK { // a key already there is rewritten
		t.Fatalf("rewrite at the limit: %d %q", code, body)
	}
	m := waitHTTP(t, p, base+"/metrics")
	for _, want := range []string{"mooncake_http_metadata_keys 4\n", "mooncake_http_metadata_refused_puts_total{limit=\"keys\"} 16\n",
		fmt.Sprintf("mooncake_http_metadata_max_bytes %d\n", metaserver.DefaultMaxBytes)} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, m)
		}
	}
}

func TestBinaryPortInUse(t *testing.T) {
	ports := testutil.FreePorts(t, 2)
	first := startMaster(t, fmt.Sprintf("--rpc_port=%d", ports[0]), "--rpc_address=127.0.0.1",
		fmt.Sprintf("--metrics_port=%d", ports[1]), "--metrics_host=127.0.0.1")
	waitHTTP(t, first, fmt.Sprintf("http://127.0.0.1:%d/health", ports[1]))
	second := startMaster(t, fmt.Sprintf("--rpc_port=%d", ports[0]), "--rpc_address=127.0.0.1", "--metrics_port=0")
	select {
	case <-second.exited:
		var ee *exec.ExitError
		if !errors.As(second.err, &ee) || ee.ExitCode() != 1 || !strings.Contains(second.out.String(), "address already in use") {
			t.Fatalf("second master: %v\n%s", second.err, second.out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second master did not fail on a busy port")
	}
}

// ping calls Ping on addr and returns the gRPC status code.
func ping(addr string) codes.Code {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return codes.Internal
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = masterpb.NewMasterClient(conn).Ping(ctx, &masterpb.PingRequest{ClientId: "probe"})
	return status.Code(err)
}
