package consistency

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/transfer/metaserver"
)

// The cluster a checked history runs on: etcd, mooncake_master processes
// with HA and the operation log, storage clients that mount the segments
// objects live in, and worker processes that only run operations. All of
// them are real processes on loopback; the TE metadata server runs in the
// test process (it is not under test).

var (
	masterBinOnce sync.Once
	masterBin     string
	masterBinErr  error
)

// buildMaster builds cmd/mooncake_master once per test binary run.
func buildMaster(t *testing.T) string {
	t.Helper()
	masterBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mooncake-consistency")
		if err != nil {
			masterBinErr = err
			return
		}
		masterBin = filepath.Join(dir, "mooncake_master")
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		out, err := exec.Command(goBin, "build", "-o", masterBin, "github.com/mooncake-go/mooncake/cmd/mooncake_master").CombinedOutput()
		if err != nil {
			masterBinErr = fmt.Errorf("go build mooncake_master: %v\n%s", err, out)
		}
	})
	if masterBinErr != nil {
		t.Fatal(masterBinErr)
	}
	return masterBin
}

// proc is a child process that can be killed, stopped and started again
// with the same command line.
type proc struct {
	name   string
	args   []string
	env    []string
	log    *testutil.SyncBuffer
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader // set when the output is the caller's to read
	exited chan struct{}
}

// start runs the process; with pipeOut its stdout is left to the caller
// (p.stdout), otherwise it goes to p.log with stderr.
func (p *proc) start(t *testing.T, pipeOut bool) {
	t.Helper()
	p.cmd = exec.Command(p.args[0], p.args[1:]...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stderr = p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	if pipeOut {
		if p.stdout, err = p.cmd.StdoutPipe(); err != nil {
			t.Fatal(err)
		}
	} else {
		p.cmd.Stdout = p.log
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	p.exited = make(chan struct{})
	cmd, exited := p.cmd, p.exited
	go func() { cmd.Wait(); close(exited) }()
}

// signal sends sig; kill waits for the process to be gone. Both do
// nothing to a process that never started.
func (p *proc) signal(sig syscall.Signal) {
	if p.exited != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *proc) kill() {
	if p.exited != nil {
		p.signal(syscall.SIGKILL)
		<-p.exited
	}
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

type cluster struct {
	t        *testing.T
	id       string
	etcd     *proc
	etcdAddr string // host:port
	etcdCli  *clientv3.Client
	meta     string
	masters  []*proc
	addrs    []string // the masters' RPC addresses
	admin    []string // their admin (metrics port) addresses
	// etcdParts are the masters' ways to etcd, one forwarder each.
	etcdParts []*testutil.Partition
	storage   []*proc
	// storageParts are the storage clients' ways to the leader when the
	// setup asks for them (setup.partitionable), else nil.
	storageParts []*testutil.Partition
	workers      []*proc // started by the test, stopped here too
	// workerParts are the workers' ways to the leader (partitionable).
	workerParts []*testutil.Partition
}

// setup is how a checked cluster differs from the default one.
type setup struct {
	// masterFlags are added to every mooncake_master's command line.
	masterFlags []string
	// partitionable: storage clients and workers reach the master
	// through a forwarder each that follows the leader
	// (cluster.leaderProxy), which a nemesis can cut, instead of
	// following the leader themselves (etcd://).
	partitionable bool
	// segmentMiB is each storage client's segment (64 MiB when 0).
	segmentMiB int
}

// startCluster starts etcd, masters HA masters with the oplog (the first
// one elected; each reaches etcd through its own forwarder), and storage
// storage clients.
func startCluster(t *testing.T, masters, storage int, su setup) *cluster {
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd not found on PATH; install it (Debian: apt-get install etcd-server) to run this test")
	}
	bin := buildMaster(t)
	c := &cluster{t: t, id: fmt.Sprintf("consistency-%d-%d", os.Getpid(), time.Now().UnixNano())}
	etcdPorts := testutil.FreePorts(t, 2)
	c.etcdAddr = "127.0.0.1:" + strconv.Itoa(etcdPorts[0])
	// The masters' ways to etcd are set up before c.stop is registered,
	// so that they are closed after it has run (cleanups run last
	// first): the storage clients unmount at the end, which the leader
	// logs in etcd; without its way there they wait out their timeout.
	for range masters {
		c.etcdParts = append(c.etcdParts, testutil.StartPartition(t, c.etcdAddr))
	}
	etcdData := t.TempDir() // removed after c.stop has run
	t.Cleanup(c.stop)
	c.startEtcd(etcdData, etcdPorts[1])
	c.startMetadata()
	for i := range masters {
		ports := testutil.FreePorts(t, 2)
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		ep := c.etcdParts[i]
		p := &proc{name: fmt.Sprintf("master%d", i), log: &testutil.SyncBuffer{}, args: []string{bin,
			"--enable_ha", "--etcd_endpoints=" + ep.Addr(), "--enable_oplog", "--cluster_id=" + c.id,
			"--rpc_address=127.0.0.1", "--rpc_port=" + strconv.Itoa(ports[0]),
			"--metrics_host=127.0.0.1", "--metrics_port=" + strconv.Itoa(ports[1]),
			"--enable_metric_reporting=false",
			// Several oplog batches in flight: the history is checked
			// over the pipelined log, gaps and orphans included.
			"--oplog_pipeline_depth=8",
			// Short read leases, so that removes are not refused most
			// of the time (a remove is not forced).
			"--default_kv_lease_ttl=50",
			// A preempted upsert's buffers are quarantined this long
			// (600 s by default): with the default, writers that keep
			// preempting each other fill the pool in seconds, the master
			// evicts the live objects, and the history shows writes lost
			// to eviction rather than what it is meant to check.
			"--put_start_release_timeout_sec=5"}}
		p.args = append(p.args, su.masterFlags...)
		c.masters = append(c.masters, p)
		c.addrs = append(c.addrs, addr)
		c.admin = append(c.admin, "127.0.0.1:"+strconv.Itoa(ports[1]))
		p.start(t, false)
		if i == 0 {
			c.waitLeader(-1)
		}
	}
	for i := range storage {
		master := ""
		if su.partitionable {
			part := c.leaderProxy()
			c.storageParts = append(c.storageParts, part)
			master = part.Addr()
		}
		var env []string
		if su.segmentMiB > 0 {
			env = []string{envSegment + "=" + strconv.Itoa(su.segmentMiB)}
		}
		p := c.clientProc(fmt.Sprintf("storage%d", i), "storage", master, env)
		p.start(t, true)
		c.storage = append(c.storage, p)
		out := bufio.NewReader(p.stdout)
		c.waitReady(p, out)
		go io.Copy(p.log, out)
	}
	return c
}

// clientProc describes a re-execution of the test binary as role; it
// reaches the master at master (host:port), or follows the leader through
// etcd when master is "".
func (c *cluster) clientProc(name, role, master string, env []string) *proc {
	if master == "" {
		master = "etcd://" + c.etcdAddr
	}
	return &proc{name: name, log: &testutil.SyncBuffer{}, args: []string{os.Args[0], "-test.run=^$"},
		env: append([]string{roleEnv + "=" + role, "MC_STORE_CLUSTER_ID=" + c.id,
			envMaster + "=" + master, envMeta + "=" + c.meta}, env...)}
}

// leaderProxy starts a forwarder that sends each new connection to the
// master elected at that moment (none while there is no leader; a killed
// leader's address until its lease expires, which refuses): a client
// given its address as a fixed master address follows failovers as its
// connections fail, and a nemesis can cut it off.
func (c *cluster) leaderProxy() *testutil.Partition {
	return testutil.StartPartitionTo(c.t, func() string {
		if l := c.elected(); l >= 0 {
			return c.addrs[l]
		}
		return ""
	})
}

// suspectSegments is the leader's count of segments whose clients are
// silent past --client_ttl (GET /status), or -1 when it cannot be read.
func (c *cluster) suspectSegments() int {
	l := c.leader()
	if l < 0 {
		return -1
	}
	hc := &http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + c.admin[l] + "/status")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var st struct {
		SuspectSegments int `json:"suspect_segments"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return -1
	}
	return st.SuspectSegments
}

// waitReady waits for the READY line a client process prints on out (its
// stdout) after setup.
func (c *cluster) waitReady(p *proc, out *bufio.Reader) {
	c.t.Helper()
	line := make(chan string, 1)
	go func() {
		s, _ := out.ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "READY" {
			c.t.Fatalf("%s did not start (%q):\n%s", p.name, s, p.log.String())
		}
	case <-time.After(60 * time.Second):
		c.t.Fatalf("%s not ready after 60 s:\n%s", p.name, p.log.String())
	}
}

// startEtcd starts etcd serving clients on c.etcdAddr and its peer
// protocol on peerPort.
func (c *cluster) startEtcd(dataDir string, peerPort int) {
	client, peer := "http://"+c.etcdAddr, "http://127.0.0.1:"+strconv.Itoa(peerPort)
	bin, _ := exec.LookPath("etcd")
	c.etcd = &proc{name: "etcd", log: &testutil.SyncBuffer{}, args: []string{bin,
		"--name", "consistency", "--data-dir", dataDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "consistency=" + peer, "--log-level", "error"}}
	c.restartEtcd()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.etcdCli = cli
}

// restartEtcd starts etcd (again, on its data directory) and waits until
// it serves.
func (c *cluster) restartEtcd() {
	c.t.Helper()
	c.etcd.start(c.t, false)
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && c.etcd.running() {
		if resp, err := hc.Get("http://" + c.etcdAddr + "/health"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), `"true"`) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("etcd did not become healthy:\n%s", c.etcd.log.String())
}

// startMetadata serves the TE metadata store from the test process.
func (c *cluster) startMetadata() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	srv := &http.Server{Handler: metaserver.New()}
	go srv.Serve(ln)
	c.t.Cleanup(func() { srv.Close() })
	c.meta = "http://" + ln.Addr().String() + "/metadata"
}

// leader returns the index of the running master the election key
// names, or -1.
func (c *cluster) leader() int {
	if i := c.elected(); i >= 0 && c.masters[i].running() {
		return i
	}
	return -1
}

// elected returns the index of the master the election key names, or -1,
// whether it still runs or not. It reads no process state: the leader
// proxies call it from their own goroutines.
func (c *cluster) elected() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.etcdCli.Get(ctx, "mooncake-store/"+c.id+"/master_view")
	if err != nil || len(resp.Kvs) == 0 {
		return -1
	}
	for i, a := range c.addrs {
		if a == string(resp.Kvs[0].Value) {
			return i
		}
	}
	return -1
}

// waitLeader waits until a running master other than not is elected and
// returns it.
func (c *cluster) waitLeader(not int) int {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if l := c.leader(); l >= 0 && l != not {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("no new leader (not master%d) after 60 s", not)
	return -1
}

// evictions counts the eviction passes the masters logged that evicted
// objects (eviction drops objects by design; the model has none).
func (c *cluster) evictions() int {
	n := 0
	for _, m := range c.masters {
		n += strings.Count(m.log.String(), `msg="evicted objects"`)
	}
	return n
}

// standby returns a running master that is not the leader, or -1.
func (c *cluster) standby() int {
	l := c.leader()
	for i, m := range c.masters {
		if i != l && m.running() {
			return i
		}
	}
	return -1
}

// stop ends every process it started; a failed test gets their logs'
// tails. Storage clients are asked to close first (they unmount).
func (c *cluster) stop() {
	var all []*proc
	if c.etcd != nil {
		all = append(all, c.etcd)
	}
	all = append(append(append(all, c.masters...), c.storage...), c.workers...)
	for _, p := range c.storage {
		p.signal(syscall.SIGCONT)
		p.stdin.Close()
	}
	for _, p := range c.storage {
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
	}
	for _, p := range all {
		p.signal(syscall.SIGCONT)
		p.kill()
	}
	if c.etcdCli != nil {
		c.etcdCli.Close()
	}
	if c.t.Failed() {
		for _, p := range all {
			c.t.Logf("--- %s log (tail):\n%s", p.name, tail(p.log.String(), 3000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
