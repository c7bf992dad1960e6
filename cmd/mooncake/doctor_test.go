package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// reexecEnv makes the test binary run main() instead of the tests (the
// /dev/shm test runs it inside a private mount namespace).
const reexecEnv = "MOONCAKE_TEST_RUN_MOONCAKE_MAIN"

// TestMain runs main() for the re-executed binary, else the tests, then
// removes the mooncake_master they built.
func TestMain(m *testing.M) {
	if os.Getenv(reexecEnv) == "1" {
		main()
		return
	}
	code := m.Run()
	if masterBin != "" {
		os.RemoveAll(filepath.Dir(masterBin))
	}
	os.Exit(code)
}

var (
	masterBinOnce sync.Once
	masterBin     string
	masterBinErr  error
)

// buildMaster builds cmd/mooncake_master once per test run.
func buildMaster(t *testing.T) string {
	t.Helper()
	masterBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mooncake-doctor-test")
		if err != nil {
			masterBinErr = err
			return
		}
		masterBin = filepath.Join(dir, "mooncake_master")
		out, err := exec.Command("go", "build", "-o", masterBin, "github.com/mooncake-go/mooncake/cmd/mooncake_master").CombinedOutput()
		if err != nil {
			masterBinErr = fmt.Errorf("go build mooncake_master: %v\n%s", err, out)
		}
	})
	if masterBinErr != nil {
		t.Fatal(masterBinErr)
	}
	return masterBin
}

// deployment is a running mooncake_master on loopback with its embedded
// HTTP metadata server.
type deployment struct {
	rpc, metrics, meta int
	log                *testutil.SyncBuffer
}

func (d deployment) master() string   { return "127.0.0.1:" + strconv.Itoa(d.rpc) }
func (d deployment) metadata() string { return fmt.Sprintf("http://127.0.0.1:%d/metadata", d.meta) }

// startMaster runs mooncake_master with extra flags until the test ends.
func startMaster(t *testing.T, extra ...string) deployment {
	t.Helper()
	bin := buildMaster(t)
	ports := testutil.FreePorts(t, 3)
	d := deployment{rpc: ports[0], metrics: ports[1], meta: ports[2], log: &testutil.SyncBuffer{}}
	args := append([]string{
		"--rpc_address=127.0.0.1", "--rpc_port=" + strconv.Itoa(d.rpc),
		"--metrics_host=127.0.0.1", "--metrics_port=" + strconv.Itoa(d.metrics),
		"--enable_http_metadata_server", "--http_metadata_server_host=127.0.0.1",
		"--http_metadata_server_port=" + strconv.Itoa(d.meta), "--enable_metric_reporting=false",
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = d.log, d.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", d.metrics))
		if err == nil {
			resp.Body.Close()
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("mooncake_master did not serve: %v\n%s", err, d.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mountSegment starts a store client that contributes a segment, as a
// Python client's setup would.
func mountSegment(t *testing.T, d deployment) {
	t.Helper()
	c, err := client.New(client.Config{LocalHostname: "127.0.0.1", MetadataServer: d.metadata(),
		GlobalSegmentSize: 1 << 20, MasterServerAddr: d.master()})
	if err != nil {
		t.Fatalf("store client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
}

// cleanEnv clears the variables that would make the doctor report this
// machine's setup instead of the deployment under test.
func cleanEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MC_") || strings.HasPrefix(k, "MOONCAKE_") || strings.HasSuffix(strings.ToLower(k), "_proxy") {
			t.Setenv(k, "")
		}
	}
}

// doctorArgs are the flags that point the doctor at d, with no RDMA
// devices (an empty sysfs directory) and a 1 MiB segment.
func doctorArgs(t *testing.T, d deployment) []string {
	return []string{"doctor", "--json", "--master", d.master(), "--metrics_port", strconv.Itoa(d.metrics),
		"--metadata", d.metadata(), "--rpc_port", strconv.Itoa(d.rpc),
		"--http_metadata_server_port", strconv.Itoa(d.meta), "--global_segment_size", "1MiB",
		"--infiniband_path", t.TempDir(), "--timeout", "3s"}
}

// runDoctor runs mooncake doctor --json, validates the output against the
// schema in docs/doctor.md, and returns the report and exit code.
func runDoctor(t *testing.T, args ...string) (doctorReport, int) {
	t.Helper()
	var out, errb bytes.Buffer
	rc := run(args, &out, &errb)
	return parseReport(t, out.Bytes(), errb.String()), rc
}

func parseReport(t *testing.T, out []byte, stderr string) doctorReport {
	t.Helper()
	validateAgainstDocumentedSchema(t, out)
	var r doctorReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("doctor output is not JSON: %v\n%s\nstderr: %s", err, out, stderr)
	}
	return r
}

// find returns the results of check (a prefix such as "port.").
func find(r doctorReport, check string) []string {
	var out []string
	for _, c := range r.Checks {
		if c.Check == check || strings.HasSuffix(check, ".") && strings.HasPrefix(c.Check, check) {
			out = append(out, fmt.Sprintf("%s|%s|%s|%s|%s", c.Check, c.Status, c.Problem, c.Message, c.Fix))
		}
	}
	return out
}

// expect asserts that check has a result with status and problem whose
// message and fix contain the given texts.
func expect(t *testing.T, r doctorReport, check, status, problem string, texts ...string) {
	t.Helper()
	for _, c := range r.Checks {
		if c.Check != check || string(c.Status) != status || c.Problem != problem {
			continue
		}
		all := c.Message + " fix: " + c.Fix
		okAll := true
		for _, want := range texts {
			okAll = okAll && strings.Contains(all, want)
		}
		if okAll {
			return
		}
	}
	t.Fatalf("no %s result %s/%s containing %q; got:\n%s", check, status, problem, texts, strings.Join(find(r, check), "\n"))
}

func TestDoctorHealthyDeploymentIsAllOK(t *testing.T) {
	cleanEnv(t)
	d := startMaster(t)
	mountSegment(t, d)
	t.Setenv("MC_TRANSFER_TIMEOUT", "20")
	// A coordinator the ranks would use (this test binary has no
	// mooncake_pg_coordinator beside it).
	coord, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	t.Setenv("MC_PG_COORDINATOR", coord.Addr().String())
	r, rc := runDoctor(t, doctorArgs(t, d)...)
	for _, c := range r.Checks {
		if c.Status != "ok" && !(c.Status == "skipped" && c.Check == "etcd") {
			t.Errorf("%s: %s: %s (fix: %s)", c.Check, c.Status, c.Message, c.Fix)
		}
	}
	if rc != 0 || r.Summary["failure"] != 0 || r.Version == "" {
		t.Fatalf("rc=%d summary=%v version=%q", rc, r.Summary, r.Version)
	}
	expect(t, r, "master", "ok", "", "answers RPCs")
	expect(t, r, "master.role", "ok", "", "role leader", "version 0.")
	expect(t, r, "master.clock", "ok", "", "clock offset")
	expect(t, r, "metadata", "ok", "", "round-trips a key")
	expect(t, r, "metadata.cluster", "ok", "", "descriptors of 1 mounted segments found")
	expect(t, r, "port."+strconv.Itoa(d.rpc), "ok", "", "held by the running Mooncake service mooncake_master")
	expect(t, r, "env", "ok", "", "MC_TRANSFER_TIMEOUT=20")
	expect(t, r, "pg coordinator", "ok", "", "accepts connections")

	// The text form says the same.
	var out, errb bytes.Buffer
	args := doctorArgs(t, d)
	if rc := run(append(args[:1:1], args[2:]...), &out, &errb); rc != 0 || !strings.Contains(out.String(), "0 warning, 0 failure") {
		t.Fatalf("text: rc=%d\n%s%s", rc, out.String(), errb.String())
	}
}

func TestDoctorMasterDown(t *testing.T) {
	cleanEnv(t)
	d := startMaster(t)
	dead := testutil.FreePorts(t, 1)[0]
	args := doctorArgs(t, d)
	args[3] = "127.0.0.1:" + strconv.Itoa(dead) // --master
	r, rc := runDoctor(t, args...)
	if rc != 1 {
		t.Fatalf("rc=%d", rc)
	}
	expect(t, r, "master", "failure", "master-unreachable", "does not answer RPCs", "connection refused", "start mooncake_master")
}

func TestDoctorMetadataServerDown(t *testing.T) {
	cleanEnv(t)
	d := startMaster(t)
	args := doctorArgs(t, d)
	args[7] = fmt.Sprintf("http://127.0.0.1:%d/metadata", testutil.FreePorts(t, 1)[0]) // --metadata
	r, rc := runDoctor(t, args...)
	if rc != 1 {
		t.Fatalf("rc=%d", rc)
	}
	expect(t, r, "metadata", "failure", "metadata-unreachable", "put:", "connection refused", "start it")
}

// A client whose MC_METADATA_CLUSTER_ID differs from the one the segments
// were published with finds none of them.
func TestDoctorWrongMetadataClusterID(t *testing.T) {
	cleanEnv(t)
	d := startMaster(t)
	mountSegment(t, d)
	t.Setenv("MC_METADATA_CLUSTER_ID", "other_cluster")
	r, rc := runDoctor(t, doctorArgs(t, d)...)
	if rc != 1 {
		t.Fatalf("rc=%d", rc)
	}
	expect(t, r, "metadata", "ok", "", "mooncake/other_cluster/doctor/")
	expect(t, r, "metadata.cluster", "failure", "segment-name-mismatch",
		"no descriptor of 1 of 1 mounted segments", "other_cluster", "published without a cluster id", "same MC_METADATA_CLUSTER_ID")
}

func TestDoctorPortTaken(t *testing.T) {
	cleanEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	r, rc := runDoctor(t, "doctor", "--json", "--master", "", "--rpc_port", strconv.Itoa(port),
		"--metrics_port", "0", "--http_metadata_server_port", "0", "--infiniband_path", t.TempDir())
	if rc != 1 {
		t.Fatalf("rc=%d", rc)
	}
	self := fmt.Sprintf("(pid %d)", os.Getpid())
	expect(t, r, "port."+strconv.Itoa(port), "failure", "port-in-use",
		fmt.Sprintf("master RPC port %d is taken by", port), self, "address already in use", "--rpc_port=<free port>")
}

func TestDoctorBadTransferTimeout(t *testing.T) {
	cleanEnv(t)
	t.Setenv("MC_TRANSFER_TIMEOUT", "30s")
	t.Setenv("MC_TRANSFER_TIMOUT", "30")
	r, rc := runDoctor(t, "doctor", "--json", "--master", "", "--rpc_port", "0", "--metrics_port", "0",
		"--http_metadata_server_port", "0", "--infiniband_path", t.TempDir())
	if rc != 1 {
		t.Fatalf("rc=%d", rc)
	}
	expect(t, r, "env", "failure", "invalid-env",
		`MC_TRANSFER_TIMEOUT="30s" is not a number of seconds`, "the default (30) applies", "set it to at least 0.001")
	expect(t, r, "env", "warning", "", "MC_TRANSFER_TIMOUT is not a variable", "did you mean MC_TRANSFER_TIMEOUT", "rename it")
}

func TestDoctorProxySet(t *testing.T) {
	cleanEnv(t)
	d := startMaster(t)
	t.Setenv("http_proxy", "http://127.0.0.1:9")
	r, _ := runDoctor(t, doctorArgs(t, d)...)
	expect(t, r, "proxy", "warning", "", "http_proxy=http://127.0.0.1:9", "does not exempt loopback", "export no_proxy=127.0.0.1")
	// Go's clients do not proxy loopback: the deployment still answers.
	expect(t, r, "metadata", "ok", "")
	expect(t, r, "master", "ok", "")

	t.Setenv("no_proxy", "127.0.0.1,localhost")
	r, _ = runDoctor(t, doctorArgs(t, d)...)
	expect(t, r, "proxy", "ok", "", "no_proxy exempts loopback")
}

// /dev/shm smaller than the segments: a 1 MiB tmpfs on /dev/shm in a
// private mount namespace when the test may make one, else a configured
// path on a file system with less room than the segment asked for.
func TestDoctorShmTooSmall(t *testing.T) {
	cleanEnv(t)
	base := []string{"doctor", "--json", "--master", "", "--rpc_port", "0", "--metrics_port", "0",
		"--http_metadata_server_port", "0", "--infiniband_path", t.TempDir()}
	if os.Geteuid() == 0 && exec.Command("unshare", "-m", "true").Run() == nil {
		t.Log("a 1 MiB tmpfs on /dev/shm in a private mount namespace")
		script := `mount --make-rprivate / && mount -t tmpfs -o size=1M tmpfs /dev/shm && exec "$0" "$@"`
		cmd := exec.Command("unshare", append([]string{"-m", "sh", "-c", script, os.Args[0]}, append(base, "--global_segment_size", "64MiB")...)...)
		cmd.Env = append(os.Environ(), reexecEnv+"=1")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ee, isExit := err.(*exec.ExitError); err != nil && !(isExit && ee.ExitCode() == 0) {
			t.Logf("doctor in a private namespace: %v (stderr %s)", err, errb.String())
		}
		r := parseReport(t, out.Bytes(), errb.String())
		expect(t, r, "shm", "warning", "", "/dev/shm: 1.0 MiB free of 1.0 MiB", "segments and buffers 64.0 MiB", "too small", "--shm-size=128.0 MiB")
		return
	}
	t.Log("no private mount namespace: a configured --shm_path with less room than the segment")
	dir := t.TempDir()
	r, _ := runDoctor(t, append(base, "--shm_path", dir, "--global_segment_size", "1000000T")...)
	expect(t, r, "shm", "warning", "", dir+":", "too small", "enlarge it")
}

func TestDoctorHAWithEtcd(t *testing.T) {
	cleanEnv(t)
	ep := testutil.StartEtcd(t)
	d := startMaster(t, "--enable_ha", "--ha_backend_connstring="+ep, "--cluster_id=cluster_a")
	args := doctorArgs(t, d)
	args[3] = "etcd://" + strings.TrimPrefix(ep, "http://")
	t.Setenv("MC_STORE_CLUSTER_ID", "cluster_a")
	var r doctorReport
	deadline := time.Now().Add(30 * time.Second) // the elected leader waits one lease TTL before serving
	for {
		r, _ = runDoctor(t, args...)
		if len(find(r, "master.role")) == 1 && strings.Contains(find(r, "master.role")[0], "|ok|") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	expect(t, r, "master.leader", "ok", "", `elected leader of cluster "cluster_a" is 127.0.0.1:`+strconv.Itoa(d.rpc))
	expect(t, r, "master.role", "ok", "", "role leader", `HA cluster "cluster_a"`)
	expect(t, r, "etcd", "ok", "", "healthy", "leader")

	t.Setenv("MC_STORE_CLUSTER_ID", "cluster_b")
	r, rc := runDoctor(t, args...)
	if rc != 1 {
		t.Fatalf("rc=%d", rc)
	}
	expect(t, r, "master.leader", "failure", "no-master-elected",
		"mooncake-store/cluster_b/master_view is absent", `"cluster_a"`, "same cluster id")
}

func TestDoctorLogs(t *testing.T) {
	cleanEnv(t)
	d := startMaster(t)
	// A second master on the same ports fails, and says why.
	cmd := exec.Command(buildMaster(t), "--rpc_address=127.0.0.1", "--rpc_port="+strconv.Itoa(d.rpc),
		"--metrics_host=127.0.0.1", "--metrics_port="+strconv.Itoa(d.metrics))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("second master started:\n%s", out)
	}
	if !strings.Contains(string(out), "fix: stop that process") || !strings.Contains(string(out), "mooncake doctor") {
		t.Fatalf("the master's bind failure lacks the doctor's wording:\n%s", out)
	}
	dir := t.TempDir()
	masterLog := filepath.Join(dir, "master.log")
	clientLog := filepath.Join(dir, "client.log")
	os.WriteFile(masterLog, out, 0o644)
	os.WriteFile(clientLog, []byte("INFO all fine\n"+
		"E1201 store put failed: NO_AVAILABLE_HANDLE (-200)\n"+
		"W transfer: metadata (-200): GET http://h:8080/metadata?key=mooncake%2Fram%2Fx: connection refused\n"+
		"I0101 transfer_engine.cpp:42] No matched device found\n"), 0o644)
	var stdout, stderr bytes.Buffer
	if rc := run([]string{"doctor", "logs", "--json", masterLog, clientLog}, &stdout, &stderr); rc != 1 {
		t.Fatalf("rc=%d stderr=%s", rc, stderr.String())
	}
	var got struct {
		Findings []struct {
			File, Text, Problem, Cause, Fix string
			Line                            int
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, f := range got.Findings {
		seen[filepath.Base(f.File)+":"+f.Problem] = f.Line
		if f.Cause == "" || f.Fix == "" {
			t.Errorf("finding without cause or fix: %+v", f)
		}
	}
	for key, line := range map[string]int{"client.log:NO_AVAILABLE_HANDLE": 2, "client.log:ERR_METADATA": 3,
		"client.log:master-unreachable": 3, "client.log:rdma-device-missing": 4} {
		if seen[key] != line {
			t.Errorf("%s: line %d, want %d (findings %v)", key, seen[key], line, seen)
		}
	}
	if seen["master.log:port-in-use"] == 0 {
		t.Errorf("the master's log: no port-in-use finding (findings %v)", seen)
	}
	if len(got.Findings) != 5 {
		t.Errorf("%d findings, want 5: %v", len(got.Findings), seen)
	}

	empty := filepath.Join(dir, "empty.log")
	os.WriteFile(empty, []byte("nothing to see\n"), 0o644)
	stdout.Reset()
	if rc := run([]string{"doctor", "logs", empty}, &stdout, &stderr); rc != 0 || !strings.Contains(stdout.String(), "0 known problems") {
		t.Fatalf("clean log: rc=%d %s", rc, stdout.String())
	}
	if rc := run([]string{"doctor", "logs", filepath.Join(dir, "missing.log")}, &stdout, &stderr); rc != 2 {
		t.Fatalf("missing file: rc=%d", rc)
	}
}

func TestDoctorError(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"doctor", "error", "-200"}, &out, &errb); rc != 0 {
		t.Fatalf("rc=%d %s", rc, errb.String())
	}
	for _, want := range []string{"store error -200 NO_AVAILABLE_HANDLE", "global_segment_size", "engine error -200 ERR_METADATA", `"metadata (-200)"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("doctor error -200 lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if rc := run([]string{"doctor", "error", "--json", "lease_expired"}, &out, &errb); rc != 0 {
		t.Fatalf("rc=%d", rc)
	}
	var infos []struct {
		Component, Name, Fix string
		Code                 int
	}
	if err := json.Unmarshal(out.Bytes(), &infos); err != nil || len(infos) != 1 || infos[0].Code != -707 ||
		!strings.Contains(infos[0].Fix, "--default_kv_lease_ttl") {
		t.Fatalf("%v %+v", err, infos)
	}
	if rc := run([]string{"doctor", "error", "-4242"}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "not an error number") {
		t.Fatalf("unknown code: rc=%d %s", rc, errb.String())
	}
	if rc := run([]string{"doctor", "error"}, &out, &errb); rc != 2 {
		t.Fatalf("no code: rc=%d", rc)
	}
}

func TestDoctorBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"doctor", "--nosuch"},
		{"doctor", "stray"},
		{"doctor", "--global_segment_size", "lots"},
		{"doctor", "--timeout", "0s"},
		{"doctor", "logs"},
	} {
		var out, errb bytes.Buffer
		if rc := run(args, &out, &errb); rc != 2 || errb.Len() == 0 {
			t.Errorf("%q: rc=%d stderr=%q", args, rc, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if rc := run([]string{"doctor", "--help"}, &out, &errb); rc != 0 || !strings.Contains(errb.String(), "--shm_path") && !strings.Contains(errb.String(), "-shm_path") {
		t.Fatalf("--help: rc=%d %s", rc, errb.String())
	}
}
