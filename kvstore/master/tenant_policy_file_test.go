package master

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTenantQuotaPolicyParsesUpstreamsFormat(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MultiTenant = true
	got, err := ParseTenantQuotaPolicy([]byte(`# quotas
version: 1

tenants:
  - name: "tenant-a"
    quota: 4GB
  - name: b
    quota: 1024
  - quota: 2KB   # either order
    name: 'c d'
  - name: e
    quota: 7B
`), cfg)
	want := map[string]uint64{"tenant-a": 4 << 30, "b": 1024, "c d": 2048, "e": 7}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("parse: %v, %v; want %v", got, err, want)
	}
	again, err := ParseTenantQuotaPolicy(FormatTenantQuotaPolicy(got), cfg)
	if err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("round trip: %v, %v", again, err)
	}
	if empty, err := ParseTenantQuotaPolicy(FormatTenantQuotaPolicy(nil), cfg); err != nil || len(empty) != 0 {
		t.Fatalf("empty policy: %v, %v", empty, err)
	}
	for _, bad := range []string{
		"tenants: []\n",
		"version: 2\ntenants: []\n",
		"version: 1\n",
		"version: 1\ntenants: {a: 1}\n",
		"version: 1\ntenants:\n  - name: a\n",
		"version: 1\ntenants:\n  - quota: 1\n",
		"version: 1\ntenants:\n  - name: a\n    quota: 0\n",
		"version: 1\ntenants:\n  - name: a\n    quota: -1\n",
		"version: 1\ntenants:\n  - name: a\n    quota: 1PB\n",
		"version: 1\ntenants:\n  - name: a\n    quota: 20000000TB\n",
		"version: 1\ntenants:\n  - name: a\n    quota: 99999999999999999999\n",
		"version: 1\ntenants:\n  - name: a\n    quota: 1\n  - name: a\n    quota: 2\n",
		"version: 1\ntenants:\n  - name: _admin\n    quota: 1\n",
		"version: 1\ntenants:\n  - name: \"\"\n    quota: 1\n",
		"version: [1\n",
	} {
		if got, err := ParseTenantQuotaPolicy([]byte(bad), cfg); err == nil {
			t.Errorf("policy %q parsed as %v", bad, got)
		}
	}
}

// TestTenantPolicyFileLoadedAndWrittenBack: the master registers the
// policy file's tenants at start, writes every quota change through the
// admin API back to the file (a restarted master starts with them), and
// undoes a change it cannot write.
func TestTenantPolicyFileLoadedAndWrittenBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "quotas.yaml")
	if err := os.WriteFile(path, []byte("version: 1\ntenants:\n  - name: a\n    quota: 1MB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func() *Server {
		return newTestServer(t, func(o *Options) {
			o.Config.MultiTenant = true
			o.TenantPolicyFile = path
		})
	}
	quotas := func(s *Server) map[string]uint64 {
		out := map[string]uint64{}
		s.WithState(func(st *State, _ time.Time) {
			for _, ti := range st.Tenants() {
				out[ti.ID] = ti.QuotaBytes
			}
		})
		return out
	}
	do := func(s *Server, method, target, body string) int {
		rec := httptest.NewRecorder()
		s.AdminHandler().ServeHTTP(rec, fromLocalhost(httptest.NewRequest(method, target, strings.NewReader(body))))
		return rec.Code
	}
	s := start()
	if got := quotas(s); !reflect.DeepEqual(got, map[string]uint64{DefaultTenant: 0, "a": 1 << 20}) {
		t.Fatalf("tenants at start: %v", got)
	}
	if code := do(s, "PUT", "/api/v1/tenant_quotas", `{"tenant_id":"b","quota_bytes":4096}`); code != http.StatusOK {
		t.Fatalf("PUT b: %d", code)
	}
	if code := do(s, "DELETE", "/api/v1/tenant_quotas?tenant_id=a", ""); code != http.StatusOK {
		t.Fatalf("DELETE a: %d", code)
	}
	if code := do(s, "PUT", "/api/v1/tenant_quotas", `{"tenant_id":"c","quota_bytes":0}`); code != http.StatusBadRequest {
		t.Fatalf("PUT of an unlimited tenant with a policy file: %d, want 400", code)
	}
	if got := quotas(start()); !reflect.DeepEqual(got, map[string]uint64{DefaultTenant: 0, "b": 4096}) {
		t.Fatalf("tenants of a restarted master: %v", got)
	}

	// The file cannot be written (its directory is gone): the change is
	// undone.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if code := do(s, "PUT", "/api/v1/tenant_quotas", `{"tenant_id":"b","quota_bytes":1}`); code != http.StatusInternalServerError {
		t.Fatalf("PUT with the policy file unwritable: %d, want 500", code)
	}
	if code := do(s, "PUT", "/api/v1/tenant_quotas", `{"tenant_id":"d","quota_bytes":1}`); code != http.StatusInternalServerError {
		t.Fatalf("PUT of a new tenant with the policy file unwritable: %d, want 500", code)
	}
	if code := do(s, "DELETE", "/api/v1/tenant_quotas?tenant_id=b", ""); code != http.StatusInternalServerError {
		t.Fatalf("DELETE with the policy file unwritable: %d, want 500", code)
	}
	if got := quotas(s); !reflect.DeepEqual(got, map[string]uint64{DefaultTenant: 0, "b": 4096}) {
		t.Fatalf("tenants after changes that were not written: %v", got)
	}

	// Refused: a policy file without multi-tenancy, with HA, or unreadable.
	for name, mut := range map[string]func(o *Options){
		"single tenant": func(o *Options) { o.TenantPolicyFile = path },
		"HA":            func(o *Options) { o.Config.MultiTenant, o.Standby, o.TenantPolicyFile = true, true, path },
		"missing file":  func(o *Options) { o.Config.MultiTenant, o.TenantPolicyFile = true, path },
	} {
		opts := Options{Config: DefaultConfig()}
		mut(&opts)
		if _, err := NewServer(opts); err == nil {
			t.Errorf("%s: NewServer accepted the policy file", name)
		}
	}
}
