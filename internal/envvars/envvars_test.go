package envvars

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		v     *Var
		value string
		ok    bool
	}{
		{TransferTimeout, "30", true},
		{TransferTimeout, "0.5", true},
		{TransferTimeout, "30s", false},
		{TransferTimeout, "0", false},
		{TransferTimeout, "-3", false},
		{ForceTCP, "true", true},
		{ForceTCP, "ON", true},
		{ForceTCP, "0", true},
		{ForceTCP, "maybe", false},
		{MinRPCPort, "15000", true},
		{MinRPCPort, "70000", false},
		{MinRPCPort, "x", false},
		{HandshakeMaxLength, "134217728", true},
		{HandshakeMaxLength, "134217729", false},
		{LogLevel, "1", true},
		{LogLevel, "debug", false},
		{TCPBindAddress, "127.0.0.1", true},
		{TCPBindAddress, "localhost", false},
		{Find("MOONCAKE_LIB"), "/nonexistent/libmooncake.so", false},
	}
	for _, c := range cases {
		err := c.v.Validate(c.value)
		if (err == nil) != c.ok {
			t.Errorf("%s=%q: err=%v, want ok=%v", c.v.Name, c.value, err, c.ok)
		}
	}
	if got := TransferTimeout.Range(); got != "at least 0.001" {
		t.Errorf("range %q", got)
	}
}

func TestAccessorsFallBackOnInvalidValues(t *testing.T) {
	t.Setenv("MC_TRANSFER_TIMEOUT", "2.5")
	if d := TransferTimeout.Duration(time.Minute); d != 2500*time.Millisecond {
		t.Errorf("valid: %v", d)
	}
	t.Setenv("MC_TRANSFER_TIMEOUT", "30s")
	if d := TransferTimeout.Duration(time.Minute); d != time.Minute {
		t.Errorf("invalid: %v", d)
	}
	t.Setenv("MC_TCP_LANES_PER_PEER", " 8 ")
	if n := TCPLanesPerPeer.Int(4); n != 8 {
		t.Errorf("lanes %d", n)
	}
	t.Setenv("MC_TCP_LANES_PER_PEER", "0")
	if n := TCPLanesPerPeer.Int(4); n != 4 {
		t.Errorf("lanes out of range: %d", n)
	}
	t.Setenv("MC_FORCE_TCP", "yes")
	if !ForceTCP.Enabled() {
		t.Error("MC_FORCE_TCP=yes not enabled")
	}
	t.Setenv("MC_FORCE_TCP", "sure")
	if ForceTCP.Enabled() {
		t.Error("MC_FORCE_TCP=sure enabled")
	}
}

func TestComplaintWording(t *testing.T) {
	got := TransferTimeout.Complaint("30s", TransferTimeout.Validate("30s"))
	want := `MC_TRANSFER_TIMEOUT="30s" is not a number of seconds (write 30, not 30s); it is ignored and the default (30) applies`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestClosest(t *testing.T) {
	if v := Closest("MC_TRANSFER_TIMOUT"); v != TransferTimeout {
		t.Errorf("Closest = %v", v)
	}
	if v := Closest("MC_SOMETHING_ELSE_ENTIRELY"); v != nil {
		t.Errorf("Closest = %v", v.Name)
	}
}

func TestTableHasNoDuplicates(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range All {
		if seen[v.Name] {
			t.Errorf("%s twice", v.Name)
		}
		seen[v.Name] = true
		if v.Doc == "" || v.Default == "" {
			t.Errorf("%s lacks doc or default", v.Name)
		}
		if v.Kind == Enum && len(v.Values) == 0 {
			t.Errorf("%s: enum without values", v.Name)
		}
	}
}

// envName matches a variable name the sources read: a quoted literal in
// Go, Python and C++, a $NAME or ${NAME} in shell.
var envName = regexp.MustCompile(`["'\$\{]((?:MC|MOONCAKE)_[A-Z0-9_]+)["'}:\s-]`)

// TestTableCoversSources keeps the table in step with the code: every
// MC_*/MOONCAKE_* name that production sources mention is in the table,
// and every name the table says Python, C++ or a script reads is in those
// sources. (The Go runtime reads its variables through the accessors, so
// a Go name outside the table shows up here as a literal.)
func TestTableCoversSources(t *testing.T) {
	root := filepath.Join("..", "..")
	mentioned := map[string]string{}
	scan := func(dir string, exts ...string) {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				switch d.Name() {
				case ".venv", "testutil", "envvars", "tests", "testdata", "build":
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(p, "_test.go") || !hasSuffix(p, exts) {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range envName.FindAllStringSubmatch(string(b), -1) {
				mentioned[m[1]] = p
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"transfer", "kvstore", "backend", "ep", "capi", "gpu", "cmd", "internal"} {
		scan(dir, ".go")
	}
	scan("python", ".py")
	scan("demo", ".py")
	scan("benchmarks", ".py", ".go")
	scan("torch_plugin", ".cpp", ".h")
	scan("scripts", ".sh", ".py")
	if len(mentioned) < 10 {
		t.Fatalf("found only %d names; is the scan looking in the right place?", len(mentioned))
	}
	for name, file := range mentioned {
		if Find(name) == nil {
			t.Errorf("%s (read in %s) is not in internal/envvars' table", name, file)
		}
	}
	for _, v := range All {
		switch v.ReadBy {
		case "python", "torch_plugin", "scripts/setup.sh", "demo", "benchmarks":
			if _, ok := mentioned[v.Name]; !ok {
				t.Errorf("%s: the table says %s reads it, but no source mentions it", v.Name, v.ReadBy)
			}
		}
	}
}

func hasSuffix(p string, exts []string) bool {
	for _, e := range exts {
		if strings.HasSuffix(p, e) {
			return true
		}
	}
	return false
}

// zeroMeans lists the numeric variables whose 0 is a documented setting
// (their Doc says what 0 does); every other one follows the one rule: a
// non-positive value is rejected (logged, the default applies), so that
// e.g. MC_RPC_TIMEOUT_MS=0 cannot make every RPC fail at once.
var zeroMeans = map[string]bool{
	"MC_STORE_LOCAL_HOT_MAX_AGE_MS":              true, // 0: no age bound
	"MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE":     true, // 0: no limit beyond the total size limit
	"MC_STORE_RS_EVICTION_LOW_WATERMARK_PERCENT": true, // 0 %: evict down to empty
	"MC_PG_YIELD_US":                             true, // 0: block right after the spin
	"MC_PG_HANG_TIMEOUT_MS":                      true, // 0: no hang timeout
	"MC_TCP_SYNC_SPIN_US":                        true, // 0: sleep in poll(2) at once
	"MC_STORE_MASTER_SPIN_US":                    true, // 0: no busy-polling before the yield-polling
	"MC_STORE_MASTER_YIELD_US":                   true, // 0: sleep in poll(2) right after the spin
	"MC_REDIS_DB_INDEX":                          true, // 0: Redis's first database, the default
}

func TestNonPositiveValuesAreRejected(t *testing.T) {
	numeric := 0
	for _, v := range All {
		if v.Upstream() || v.Kind != Int && v.Kind != Seconds {
			continue
		}
		numeric++
		if v.Validate("-1") == nil {
			t.Errorf("%s accepts -1", v.Name)
		}
		switch err := v.Validate("0"); {
		case zeroMeans[v.Name] && err != nil:
			t.Errorf("%s rejects 0, which its doc gives a meaning: %v", v.Name, err)
		case !zeroMeans[v.Name] && err == nil:
			t.Errorf("%s accepts 0 (non-positive values must be rejected)", v.Name)
		}
	}
	if numeric < 20 {
		t.Fatalf("only %d numeric variables found; the scan is broken", numeric)
	}
	t.Setenv("MC_RPC_TIMEOUT_MS", "0")
	if n := RPCTimeoutMs.Int(10000); n != 10000 {
		t.Errorf("MC_RPC_TIMEOUT_MS=0 gave %d, want the default", n)
	}
}
