package doctor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master"
	"github.com/mooncake-go/mooncake/transfer"
)

func TestProxyCapturingClusterAddressesFails(t *testing.T) {
	cfg := Config{Master: "10.1.2.3:50051", Metadata: "http://10.1.2.4:8080/metadata"}
	env := environ{"http_proxy": "http://proxy:3128", "https_proxy": "http://proxy:3128", "no_proxy": "127.0.0.1,localhost"}
	rs := checkProxy(cfg, env)
	var got []string
	for _, r := range rs {
		got = append(got, fmt.Sprintf("%s %s | %s", r.Status, r.Message, r.Fix))
	}
	want := []string{
		"failure master 10.1.2.3:50051 would be reached through the proxy http://proxy:3128 | add 10.1.2.3 to no_proxy (export no_proxy=10.1.2.3,$no_proxy) or unset the proxy variables",
		"failure HTTP metadata server 10.1.2.4:8080 would be reached through the proxy http://proxy:3128 | add 10.1.2.4 to no_proxy (export no_proxy=10.1.2.4,$no_proxy) or unset the proxy variables",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	env["no_proxy"] = "127.0.0.1,10.1.2.0/24"
	if rs := checkProxy(cfg, env); len(rs) != 1 || rs[0].Status != OK {
		t.Fatalf("no_proxy covering the cluster: %+v", rs)
	}
}

// fakeIB builds a sysfs tree: mlx5_0 port 1 active, mlx5_1 port 1 down,
// mlx5_2 port 1 active with an all-zero GID.
func fakeIB(t *testing.T) string {
	root := t.TempDir()
	port := func(dev, state, gid string) {
		dir := filepath.Join(root, dev, "ports", "1")
		os.MkdirAll(filepath.Join(dir, "gids"), 0o755)
		os.WriteFile(filepath.Join(dir, "state"), []byte(state+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "link_layer"), []byte("Ethernet\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "gids", "0"), []byte(gid+"\n"), 0o644)
	}
	port("mlx5_0", "4: ACTIVE", "fe80:0000:0000:0000:0000:0000:0000:0001")
	port("mlx5_1", "1: DOWN", "fe80:0000:0000:0000:0000:0000:0000:0002")
	port("mlx5_2", "4: ACTIVE", zeroGID)
	return root
}

func TestRDMAFromSysfs(t *testing.T) {
	f := checkRDMA(Config{InfinibandPath: fakeIB(t)})
	if f.devices != 3 || len(f.results) != 3 {
		t.Fatalf("%+v", f)
	}
	checks := []struct {
		st      Status
		problem string
		text    string
	}{
		{OK, "", "active: mlx5_0 port 1 (Ethernet)"},
		{Warning, "rdma-port-down", "Device mlx5_1 port 1 not active (state: 1: DOWN)"},
		{Warning, "rdma-handshake", "mlx5_2 port 1 (Ethernet): GID index 0 is all zeros"},
	}
	for i, c := range checks {
		r := f.results[i]
		if r.Status != c.st || r.Problem != c.problem || !strings.Contains(r.Message, c.text) {
			t.Errorf("result %d = %+v, want %v %s %q", i, r, c.st, c.problem, c.text)
		}
	}
	if f := checkRDMA(Config{InfinibandPath: filepath.Join(t.TempDir(), "none")}); f.devices != 0 || f.results[0].Status != OK {
		t.Fatalf("no devices: %+v", f)
	}
}

func TestMemlockMattersOnlyWithRDMA(t *testing.T) {
	huge := uint64(1) << 62
	if r := checkMemlock(huge, false); r.Status != OK || !strings.Contains(r.Message, "no RDMA devices") {
		t.Fatalf("without RDMA: %+v", r)
	}
	if r := checkMemlock(huge, true); r.Status != Failure && !strings.Contains(r.Message, "unlimited") {
		t.Fatalf("with RDMA and a limit below the segments: %+v", r)
	}
}

func TestMemoryAvailable(t *testing.T) {
	mi := map[string]uint64{"MemAvailable": 10 << 30}
	for _, c := range []struct {
		need uint64
		st   Status
	}{{1 << 30, OK}, {9 << 30, Warning}, {11 << 30, Failure}} {
		if r := checkAvailable(mi, c.need); r.Status != c.st {
			t.Errorf("need %d: %+v", c.need, r)
		}
	}
	if r := checkHugepages(map[string]uint64{"HugePages_Total": 4, "Hugepagesize": 2 << 20}, environ{"MC_STORE_USE_HUGEPAGE": "1"}); r.Status != Warning {
		t.Errorf("hugepages: %+v", r)
	}
}

// statusServer is a master admin endpoint whose clock runs skew ahead.
func statusServer(t *testing.T, skew time.Duration) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(master.Status{Version: "x", Role: "leader", LeaseTTLMs: 10000,
			TimeUnixNano: time.Now().Add(skew).UnixNano()})
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestClockOffset(t *testing.T) {
	cfg := Config{Timeout: 3 * time.Second}
	for _, c := range []struct {
		skew time.Duration
		st   Status
	}{{0, OK}, {-400 * time.Millisecond, Warning}, {5 * time.Second, Failure}} {
		st, offset, rtt, err := fetchStatus(t.Context(), cfg, statusServer(t, c.skew))
		if err != nil {
			t.Fatal(err)
		}
		if d := (offset - c.skew).Abs(); d > rtt+50*time.Millisecond {
			t.Errorf("skew %v: offset %v (rtt %v)", c.skew, offset, rtt)
		}
		if r := clockResult(st, offset, rtt); r.Status != c.st {
			t.Errorf("skew %v: %+v", c.skew, r)
		}
	}
}

func TestRoleAndClusterID(t *testing.T) {
	if r := roleResult(master.Status{Role: "leader", HA: true, ClusterID: "a"}, "b"); r.Status != Failure || r.Problem != "no-master-elected" {
		t.Errorf("%+v", r)
	}
	if r := roleResult(master.Status{Role: "standby", HA: true, ClusterID: "a"}, "a"); r.Status != Warning {
		t.Errorf("%+v", r)
	}
	if r := roleResult(master.Status{Role: "leader", ClusterID: "a"}, "b"); r.Status != OK {
		t.Errorf("non-HA masters ignore the cluster id: %+v", r)
	}
}

func TestEnvCheck(t *testing.T) {
	rs := checkEnv(environ{"MC_FORCE_TCP": "true", "MC_GID_INDEX": "1", "MC_MIN_RPC_PORT": "70000",
		"MOONCAKE_PG_AUTO_SYNC_ON_FAILURE": "false", "PATH": "/bin"})
	var got []string
	for _, r := range rs {
		got = append(got, string(r.Status)+" "+r.Message)
	}
	want := []string{
		"ok valid: MC_FORCE_TCP=true",
		"warning MC_GID_INDEX is upstream Mooncake's (RDMA GID index); Mooncake-Go does not read it, so it has no effect",
		`failure MC_MIN_RPC_PORT="70000" is out of range (1 to 65535); it is ignored and the default (15000) applies`,
		`failure MOONCAKE_PG_AUTO_SYNC_ON_FAILURE="false" is not one of 0, 1; it is ignored and the default (1) applies`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The doctor says a secret variable is set, never what it holds.
func TestEnvCheckHidesSecrets(t *testing.T) {
	const value = "the-secret-value-0123456789"
	for _, name := range []string{"MC_TE_SECRET", "MC_TENANT_TOKEN", "MC_PG_COORDINATOR_SECRET"} {
		rs := checkEnv(environ{name: value})
		if len(rs) != 1 || rs[0].Status != OK || !strings.Contains(rs[0].Message, name+" (set; a secret, not shown)") {
			t.Errorf("%s: %+v", name, rs)
		}
		for _, r := range rs {
			if strings.Contains(r.Message+r.Fix, value) {
				t.Errorf("%s: the doctor shows the secret: %+v", name, r)
			}
		}
	}
}

func TestPortRangeExhausted(t *testing.T) {
	listening := map[int]string{15000: "1", 15001: "2"}
	env := environ{"MC_MIN_RPC_PORT": "15000", "MC_MAX_RPC_PORT": "15001"}
	if r := portRange("p", "engine", env, envvars.MinRPCPort, envvars.MaxRPCPort, 1, 2, listening); r.Status != Failure || r.Problem != "port-in-use" {
		t.Errorf("%+v", r)
	}
	env["MC_MAX_RPC_PORT"] = "14000"
	if r := portRange("p", "engine", env, envvars.MinRPCPort, envvars.MaxRPCPort, 1, 2, listening); r.Status != Failure || !strings.Contains(r.Message, "is above") {
		t.Errorf("%+v", r)
	}
}

// Every code kvstore and transfer name has an explanation.
func TestEveryCodeExplained(t *testing.T) {
	for n := -2000; n <= 0; n++ {
		if c := kvstore.ErrorCode(n); !strings.HasPrefix(c.String(), "ERROR_") {
			if _, ok := storeExplanations[c]; !ok {
				t.Errorf("store code %d (%s) has no explanation", n, c)
			}
		}
		if c := transfer.Code(n); !strings.HasPrefix(c.String(), "error ") && n != 0 {
			if _, ok := engineExplanations[c]; !ok {
				t.Errorf("engine code %d (%s) has no explanation", n, c)
			}
		}
	}
	if got := ExplainCode("-101"); len(got) != 2 || got[0].Name != "SEGMENT_NOT_FOUND" || got[1].Name != "ERR_DNS" {
		t.Errorf("-101: %+v", got)
	}
	if got := ExplainCode("err_metadata"); len(got) != 1 || got[0].Code != -200 || got[0].LogText != "metadata (-200)" {
		t.Errorf("err_metadata: %+v", got)
	}
}
