package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// These tests run a real master, a storage client in its own process (A)
// and a writer client in the test process (B), and check what the master
// does with A's objects when A falls silent with its memory intact
// (SIGSTOP; or a partition between A and the master, on loopback a proxy
// that drops A's connections while B still reaches A) and when A's process
// is replaced (kill -9 and a restart on the same endpoint: its memory
// gone).

// storageEnv makes the test binary run a storage client (runStorage)
// instead of the tests; storageArgsEnv carries its host, master and
// metadata server, separated by spaces.
const (
	storageEnv     = "MOONCAKE_TEST_RUN_STORAGE_CLIENT"
	storageArgsEnv = "MOONCAKE_TEST_STORAGE_ARGS"
)

// runStorage mounts a 16 MiB segment as the storage client named by
// storageArgsEnv, prints "ready", and serves it until stdin closes.
func runStorage() {
	args := strings.Fields(os.Getenv(storageArgsEnv))
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "storage client: want host, master and metadata server in", storageArgsEnv)
		os.Exit(2)
	}
	c, err := client.New(client.Config{LocalHostname: args[0], MasterServerAddr: args[1], MetadataServer: args[2],
		GlobalSegmentSize: 16 << 20, LocalBufferSize: 4 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, "storage client:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	c.Close()
}

// storage is a storage client child process.
type storage struct {
	cmd   *exec.Cmd
	stdin io.Closer
	out   *lockedBuffer
	done  chan struct{}
}

// startStorage starts a storage client on host and waits until its
// segment is mounted.
func startStorage(t *testing.T, host, masterAddr, meta string) *storage {
	t.Helper()
	s := &storage{cmd: exec.Command(os.Args[0]), out: &lockedBuffer{}, done: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), storageEnv+"=1", storageArgsEnv+"="+host+" "+masterAddr+" "+meta)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.cmd.Stderr = s.out
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.stdin = stdin
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ready <- sc.Scan() && sc.Text() == "ready"
		_, _ = io.Copy(io.Discard, stdout)
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("storage client %s output:\n%s", host, s.out.String())
		}
	})
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("storage client %s did not start:\n%s", host, s.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("storage client %s not ready after 30 s:\n%s", host, s.out.String())
	}
	return s
}

// signal sends sig to the storage client.
func (s *storage) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// admin reads the master's admin endpoints.
type admin string

// get decodes the JSON answer of path into v and returns the status.
func (a admin) get(t *testing.T, path string, v any) int {
	t.Helper()
	resp, err := http.Get(string(a) + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// metrics returns the samples of /metrics without labels.
func (a admin) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(string(a) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var name string
		var v float64
		if line := sc.Text(); !strings.HasPrefix(line, "#") && !strings.Contains(line, "{") {
			if _, err := fmt.Sscan(line, &name, &v); err == nil {
				out[name] = v
			}
		}
	}
	return out
}

// segment is one entry of /api/v1/segments/status.
type segment struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	ClientID string `json:"client_id"`
	Suspect  bool   `json:"suspect"`
}

// segmentsNamed returns the mounted segments named name.
func (a admin) segmentsNamed(t *testing.T, name string) []segment {
	t.Helper()
	var all []segment
	a.get(t, "/api/v1/segments/status", &all)
	var out []segment
	for _, s := range all {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// replicaSegments returns the segments holding key's replicas.
func (a admin) replicaSegments(t *testing.T, key string) []string {
	t.Helper()
	var info struct {
		Replicas []struct {
			Segment string `json:"segment_name"`
		} `json:"replicas"`
	}
	if code := a.get(t, "/query_key?key="+url.QueryEscape(key), &info); code != http.StatusOK {
		t.Fatalf("query_key %s: HTTP %d", key, code)
	}
	var out []string
	for _, r := range info.Replicas {
		out = append(out, r.Segment)
	}
	return out
}

// storeRig is a master, a storage client A on a fixed endpoint and a
// writer B (in this process, with a segment of its own). With a proxy, A
// reaches the master through it (and B reaches A directly).
type storeRig struct {
	admin      admin
	masterAddr string
	meta       string
	aHost      string
	a          *storage
	b          *client.Client
	proxy      *cutProxy
}

func newStoreRig(t *testing.T, withProxy bool, masterFlags ...string) *storeRig {
	t.Helper()
	meta := "etcd://" + testutil.StartEtcd(t)
	ports := testutil.FreePorts(t, 3)
	r := &storeRig{admin: admin(fmt.Sprintf("http://127.0.0.1:%d", ports[1])), masterAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		meta: meta, aHost: fmt.Sprintf("127.0.0.1:%d", ports[2])}
	p := startMaster(t, append([]string{fmt.Sprintf("--rpc_port=%d", ports[0]), "--rpc_address=127.0.0.1",
		fmt.Sprintf("--metrics_port=%d", ports[1]), "--metrics_host=127.0.0.1"}, masterFlags...)...)
	waitHTTP(t, p, string(r.admin)+"/health")
	aMaster := r.masterAddr
	if withProxy {
		r.proxy = startCutProxy(t, r.masterAddr)
		aMaster = r.proxy.addr()
	}
	r.a = startStorage(t, r.aHost, aMaster, meta)
	b, err := client.New(client.Config{LocalHostname: "127.0.0.1", MasterServerAddr: r.masterAddr, MetadataServer: meta,
		GlobalSegmentSize: 16 << 20, LocalBufferSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	r.b = b
	return r
}

// objectSize is the size of every object the tests write.
const objectSize = 4096

// value returns key's bytes (derived from the key) in memory B's engine
// can read.
func value(t *testing.T, key string) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, objectSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	seed := []byte(key)
	for i := range m {
		m[i] = seed[i%len(seed)] ^ byte(i/len(seed))
	}
	return m
}

// put writes key preferring segment prefer; it reports whether the write
// was acknowledged (logging why not).
func (r *storeRig) put(t *testing.T, key, prefer string) bool {
	t.Helper()
	v := value(t, key)
	cfg := client.DefaultReplicateConfig()
	cfg.PreferredSegments = []string{prefer}
	err := r.b.Put(key, []client.Part{{Addr: gpu.AddrOf(v), Size: objectSize}}, cfg, client.PutOptions{})
	if err != nil {
		t.Logf("put %s: %v", key, err)
	}
	return err == nil
}

// get reads key; it returns whether the read succeeded with key's bytes,
// and the read's error.
func (r *storeRig) get(t *testing.T, key string) (bool, error) {
	t.Helper()
	dst, err := unix.Mmap(-1, 0, objectSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(dst)
	res := r.b.GetInto(key, []client.Part{{Addr: gpu.AddrOf(dst), Size: objectSize}}, false)
	if res.Err != nil {
		return false, res.Err
	}
	return res.Size == objectSize && bytes.Equal(dst, value(t, key)), nil
}

// TestSuspectStorageClientKeepsItsObjects: a storage client silent for
// longer than --client_ttl (stopped, its memory intact) keeps its objects:
// while it is silent no new object is placed on it and every write still
// succeeds elsewhere, and once it is back every acknowledged object reads
// back exactly.
func TestSuspectStorageClientKeepsItsObjects(t *testing.T) {
	r := newStoreRig(t, false, "--client_ttl=3", "--client_dead_ttl=600")
	const n = 100
	var acked []string
	for i := range n {
		key := fmt.Sprintf("before-%03d", i)
		if !r.put(t, key, r.aHost) {
			t.Fatalf("put %s failed", key)
		}
		if segs := r.admin.replicaSegments(t, key); len(segs) != 1 || segs[0] != r.aHost {
			t.Fatalf("%s placed on %v, not on A (%s)", key, segs, r.aHost)
		}
		acked = append(acked, key)
	}

	r.a.signal(t, syscall.SIGSTOP)
	// A's segment takes no new replicas once the master judged its
	// silence (whether it keeps or drops the segment).
	testutil.WaitUntil(t, 30*time.Second, "A's segment closed to new replicas", func() bool {
		segs := r.admin.segmentsNamed(t, r.aHost)
		return len(segs) == 0 || segs[0].Suspect
	})
	for i := range n {
		key := fmt.Sprintf("during-%03d", i)
		if !r.put(t, key, r.aHost) {
			t.Fatalf("put %s while A is silent failed", key)
		}
		if segs := r.admin.replicaSegments(t, key); len(segs) != 1 || segs[0] == r.aHost {
			t.Fatalf("%s placed on %v while A is silent", key, segs)
		}
		acked = append(acked, key)
	}

	r.a.signal(t, syscall.SIGCONT)
	testutil.WaitUntil(t, 30*time.Second, "A's segment open again", func() bool {
		segs := r.admin.segmentsNamed(t, r.aHost)
		return len(segs) == 1 && !segs[0].Suspect
	})
	var lost []string
	for _, key := range acked {
		if same, err := r.get(t, key); err != nil || !same {
			lost = append(lost, fmt.Sprintf("%s (%v, same bytes %v)", key, err, same))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged objects lost, first: %s", len(lost), len(acked), lost[0])
	}
	// The master counted A's suspicion and its return, and forgot no one
	// (B, whose heartbeats may stall on a loaded machine, could be counted
	// too).
	metrics := r.admin.metrics(t)
	if metrics["master_suspected_clients_total"] < 1 || metrics["master_restored_clients_total"] < 1 ||
		metrics["master_expired_clients_total"] != 0 {
		t.Errorf("suspected %v, restored %v, expired %v clients", metrics["master_suspected_clients_total"],
			metrics["master_restored_clients_total"], metrics["master_expired_clients_total"])
	}
	// Placements on A resume.
	if !r.put(t, "after", r.aHost) {
		t.Fatal("put after A came back failed")
	}
	if segs := r.admin.replicaSegments(t, "after"); len(segs) != 1 || segs[0] != r.aHost {
		t.Fatalf("after placed on %v, not on A", segs)
	}
}

// TestPartitionedStorageClientKeepsItsObjects: storage client A is cut off
// from the master (a proxy between them drops every connection) while the
// writer B still reaches A. B's writes keep going to A until the master
// judges A's silence (A is alive, so they are acknowledged), then go
// elsewhere; when the partition heals every acknowledged object, those
// written into A during the partition included, reads back exactly.
func TestPartitionedStorageClientKeepsItsObjects(t *testing.T) {
	r := newStoreRig(t, true, "--client_ttl=3", "--client_dead_ttl=600")
	var acked []string
	for i := range 50 {
		key := fmt.Sprintf("before-%03d", i)
		if !r.put(t, key, r.aHost) {
			t.Fatalf("put %s failed", key)
		}
		acked = append(acked, key)
	}

	r.proxy.setCut(true)
	intoA := 0
	for i := 0; ; i++ {
		segs := r.admin.segmentsNamed(t, r.aHost)
		if closed := len(segs) == 0 || segs[0].Suspect; closed || i == 2000 {
			if !closed {
				t.Fatal("A's segment still takes replicas after 2000 puts into the partition")
			}
			break
		}
		key := fmt.Sprintf("partition-%04d", i)
		if r.put(t, key, r.aHost) {
			acked = append(acked, key)
			if where := r.admin.replicaSegments(t, key); len(where) == 1 && where[0] == r.aHost {
				intoA++
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d objects written into A during the partition before the master closed its segment", intoA)
	for i := range 50 {
		key := fmt.Sprintf("suspect-%03d", i)
		if !r.put(t, key, r.aHost) {
			t.Fatalf("put %s while A is cut off failed", key)
		}
		if segs := r.admin.replicaSegments(t, key); len(segs) != 1 || segs[0] == r.aHost {
			t.Fatalf("%s placed on %v while A is cut off", key, segs)
		}
		acked = append(acked, key)
	}

	r.proxy.setCut(false)
	testutil.WaitUntil(t, 30*time.Second, "A's segment open again", func() bool {
		segs := r.admin.segmentsNamed(t, r.aHost)
		return len(segs) == 1 && !segs[0].Suspect
	})
	var lost []string
	for _, key := range acked {
		if same, err := r.get(t, key); err != nil || !same {
			lost = append(lost, fmt.Sprintf("%s (%v, same bytes %v)", key, err, same))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged objects lost (%d written into A during the partition), first: %s",
			len(lost), len(acked), intoA, lost[0])
	}
}

// TestRestartedStorageClientsObjectsAreMissing: a storage client killed and
// restarted on the same endpoint is a new incarnation whose memory holds
// none of the old objects: the master drops them as soon as the new one
// mounts (well within --client_ttl), so reads report them missing rather
// than return other bytes, and new objects land on the new segment.
func TestRestartedStorageClientsObjectsAreMissing(t *testing.T) {
	r := newStoreRig(t, false, "--client_ttl=60")
	const n = 50
	for i := range n {
		if key := fmt.Sprintf("old-%03d", i); !r.put(t, key, r.aHost) {
			t.Fatalf("put %s failed", key)
		}
	}
	old := r.admin.segmentsNamed(t, r.aHost)
	if len(old) != 1 {
		t.Fatalf("segments named %s: %v", r.aHost, old)
	}
	r.a.signal(t, syscall.SIGKILL)
	<-r.a.done
	startStorage(t, r.aHost, r.masterAddr, r.meta)
	segs := r.admin.segmentsNamed(t, r.aHost)
	if len(segs) != 1 || segs[0].ClientID == old[0].ClientID {
		t.Fatalf("segments named %s after the restart: %+v (before: %+v)", r.aHost, segs, old)
	}
	for i := range n {
		key := fmt.Sprintf("old-%03d", i)
		if same, err := r.get(t, key); kvstore.CodeOf(err) != kvstore.ObjectNotFound {
			t.Fatalf("%s after its memory was re-created: err %v (same bytes %v), want OBJECT_NOT_FOUND", key, err, same)
		}
	}
	// B's engine still holds the old process's connection: its first
	// transfer there fails and makes it look the endpoint up again
	// (docs/transfer-engine.md), so that write may be retried once.
	for i := range n {
		key := fmt.Sprintf("new-%03d", i)
		if !r.put(t, key, r.aHost) && (i > 0 || !r.put(t, key, r.aHost)) {
			t.Fatalf("put %s on the restarted client failed", key)
		}
		if segs := r.admin.replicaSegments(t, key); len(segs) != 1 || segs[0] != r.aHost {
			t.Fatalf("%s placed on %v, not on the restarted A", key, segs)
		}
		if same, err := r.get(t, key); err != nil || !same {
			t.Fatalf("%s reads back: err %v, same bytes %v", key, err, same)
		}
	}
}
