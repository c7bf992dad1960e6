package master

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

func TestResolveTenant(t *testing.T) {
	on := DefaultConfig()
	on.MultiTenant = true
	for _, c := range []struct {
		id, want string
		code     kvstore.ErrorCode
	}{
		{"", DefaultTenant, kvstore.OK},
		{"default", DefaultTenant, kvstore.OK},
		{"team-a", "team-a", kvstore.OK},
		{"_system", "", kvstore.InvalidParams},
		{"a\x01b", "", kvstore.InvalidParams},
		{"a\x7f", "", kvstore.InvalidParams},
		{"a\x00b", "", kvstore.InvalidParams},
	} {
		if got, code := on.ResolveTenant(c.id); got != c.want || code != c.code {
			t.Errorf("ResolveTenant(%q) = %q, %v; want %q, %v", c.id, got, code, c.want, c.code)
		}
	}
	off := DefaultConfig()
	if got, code := off.ResolveTenant("_anything\x01"); got != DefaultTenant || code != kvstore.OK {
		t.Errorf("without multi-tenancy every id is the default tenant, got %q %v", got, code)
	}
	if k := off.ObjectKey("a", "k"); k != "k" {
		t.Errorf("ObjectKey without multi-tenancy = %q", k)
	}
}

// asTenant returns a context whose RPCs carry tenant, as the client sends it.
func asTenant(c context.Context, tenant string) context.Context {
	return metadata.AppendToOutgoingContext(c, kvstore.TenantMetadataKey, tenant)
}

// TestTenantIsolationOverGRPC runs the isolation rules through the RPC
// edge: the tenant travels in the call's metadata.
func TestTenantIsolationOverGRPC(t *testing.T) {
	srv := newTestServer(t, func(o *Options) { o.Config.MultiTenant = true })
	cl := startBufconn(t, srv)
	c := ctx(t)
	if r, err := cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c1", Segment: seg("s1", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	put := func(ctx context.Context, key string) int32 {
		ps, err := cl.PutStart(ctx, &masterpb.PutStartRequest{ClientId: "c1", Key: key, Size: 64, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if ps.ErrorCode != 0 {
			return ps.ErrorCode
		}
		r, err := cl.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "c1", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return r.ErrorCode
	}
	a, b := asTenant(c, "a"), asTenant(c, "b")
	if code := put(a, "k"); code != int32(kvstore.TenantNotRegistered) {
		t.Fatalf("unregistered tenant's put = %d, want -1701", code)
	}
	if code := put(asTenant(c, "_bad"), "k"); code != int32(kvstore.InvalidParams) {
		t.Fatalf("invalid tenant's put = %d, want -600", code)
	}
	for _, id := range []string{"a", "b"} {
		var code kvstore.ErrorCode
		srv.WithState(func(st *State, _ time.Time) { code = st.SetTenantQuota(id, 0) })
		if code != kvstore.OK {
			t.Fatal(code)
		}
	}
	if code := put(a, "k"); code != 0 {
		t.Fatalf("a's put = %d", code)
	}
	if r, _ := cl.ExistKey(b, &masterpb.KeyRequest{Key: "k"}); r.Exists || r.ErrorCode != 0 {
		t.Fatalf("b sees a's key: %v", r)
	}
	if r, _ := cl.GetReplicaList(b, &masterpb.KeyRequest{Key: "k"}); r.ErrorCode != int32(kvstore.ObjectNotFound) {
		t.Fatalf("b reads a's key: %v", r)
	}
	if r, _ := cl.BatchExistKey(c, &masterpb.BatchKeyRequest{Keys: []string{"k"}}); r.Items[0].Exists {
		t.Fatal("the default tenant sees a's key")
	}
	// The packed answer: 1, 0, or the scope's refusal for every key.
	for _, tc := range []struct {
		ctx  context.Context
		want int32
	}{{a, 1}, {c, 0}, {asTenant(c, "_bad"), int32(kvstore.InvalidParams)}} {
		r, err := cl.BatchExistCodes(tc.ctx, &masterpb.BatchKeyRequest{Keys: []string{"k", "k"}})
		if err != nil || len(r.Codes) != 2 || r.Codes[0] != tc.want || r.Codes[1] != tc.want {
			t.Fatalf("BatchExistCodes = %v, %v; want two %d", r.GetCodes(), err, tc.want)
		}
	}
	if r, _ := cl.Remove(b, &masterpb.RemoveRequest{Key: "k", Force: true}); r.ErrorCode != int32(kvstore.ObjectNotFound) {
		t.Fatalf("b removes a's key: %v", r)
	}
	if r, _ := cl.RemoveAll(b, &masterpb.RemoveAllRequest{Force: true}); r.Count != 0 {
		t.Fatalf("b's remove_all removed %d", r.Count)
	}
	if r, _ := cl.BatchRemove(asTenant(c, "_bad"), &masterpb.BatchRemoveRequest{Keys: []string{"k"}, Force: true}); r.ErrorCodes[0] != int32(kvstore.InvalidParams) {
		t.Fatalf("invalid tenant's batch remove: %v", r.ErrorCodes)
	}
	if code := put(b, "k"); code != 0 {
		t.Fatalf("b's put of the same key = %d", code)
	}
	if r, _ := cl.BatchGetReplicaList(a, &masterpb.BatchKeyRequest{Keys: []string{"k"}}); r.Items[0].ErrorCode != 0 {
		t.Fatalf("a lost its key: %v", r.Items[0])
	}
	if r, _ := cl.RemoveByRegex(a, &masterpb.RemoveByRegexRequest{Pattern: "^k$", Force: true}); r.Count != 1 {
		t.Fatalf("a's regex removed %d, want its own 1", r.Count)
	}
	if r, _ := cl.ExistKey(b, &masterpb.KeyRequest{Key: "k"}); !r.Exists {
		t.Fatal("a's regex removed b's key")
	}
}

// TestTenantQuotaAdminAPI drives /api/v1/tenant_quotas and checks the
// quota it sets is enforced and shown in /metrics.
func TestTenantQuotaAdminAPI(t *testing.T) {
	srv := newTestServer(t, func(o *Options) { o.Config.MultiTenant = true })
	cl := startBufconn(t, srv)
	h := httptest.NewServer(srv.AdminHandler())
	defer h.Close()
	call := func(method, path, body string) (int, string) {
		req, err := http.NewRequest(method, h.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := call("PUT", "/api/v1/tenant_quotas", `{"tenant_id":"a","quota_bytes":100}`); code != 200 || !strings.Contains(body, `"quota_bytes":100`) {
		t.Fatalf("PUT = %d %s", code, body)
	}
	for _, bad := range []string{`{"tenant_id":"a"}`, `not json`, `{"tenant_id":"_x","quota_bytes":1}`} {
		if code, body := call("PUT", "/api/v1/tenant_quotas", bad); code != 400 || !strings.Contains(body, "error_code") {
			t.Fatalf("PUT %s = %d %s, want 400", bad, code, body)
		}
	}
	c := ctx(t)
	if r, err := cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c1", Segment: seg("s1", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	a := asTenant(c, "a")
	ps, _ := cl.PutStart(a, &masterpb.PutStartRequest{ClientId: "c1", Key: "k", Size: 60, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
	if ps.ErrorCode != 0 {
		t.Fatalf("put within quota: %d", ps.ErrorCode)
	}
	cl.PutEnd(a, &masterpb.PutEndRequest{ClientId: "c1", Key: "k"})
	ps, _ = cl.PutStart(a, &masterpb.PutStartRequest{ClientId: "c1", Key: "k2", Size: 60, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
	if ps.ErrorCode != int32(kvstore.TenantQuotaExceeded) || len(ps.Replicas) != 0 {
		t.Fatalf("put past quota: %v", ps)
	}
	code, body := call("GET", "/api/v1/tenant_quotas?tenant_id=a", "")
	var info TenantInfo
	if err := json.Unmarshal([]byte(body), &info); code != 200 || err != nil || info.UsedBytes != 60 || info.Objects != 1 {
		t.Fatalf("GET a = %d %s", code, body)
	}
	if code, body := call("GET", "/api/v1/tenant_quotas", ""); code != 200 || !strings.Contains(body, `"tenant_id":"default"`) {
		t.Fatalf("GET all = %d %s", code, body)
	}
	if code, _ := call("GET", "/api/v1/tenant_quotas?tenant_id=nobody", ""); code != 404 {
		t.Fatalf("GET unknown = %d", code)
	}
	if code, body := call("DELETE", "/api/v1/tenant_quotas?tenant_id=a", ""); code != 409 || !strings.Contains(body, "-1702") {
		t.Fatalf("DELETE non-empty = %d %s", code, body)
	}
	if code, body := call("GET", "/get_all_keys?tenant_id=a", ""); code != 200 || strings.TrimSpace(body) != `["k"]` {
		t.Fatalf("get_all_keys a = %d %s", code, body)
	}
	if code, _ := call("GET", "/query_key?key=k&tenant_id=a", ""); code != 200 {
		t.Fatalf("query_key a = %d", code)
	}
	if code, _ := call("GET", "/query_key?key=k", ""); code != 404 {
		t.Fatalf("query_key in the default tenant = %d, want 404", code)
	}
	_, metrics := call("GET", "/metrics", "")
	if !strings.Contains(metrics, `master_tenant_used_bytes{tenant_id="a"} 60`) || !strings.Contains(metrics, `master_tenant_quota_bytes{tenant_id="a"} 100`) {
		t.Fatalf("metrics lack tenant a's gauges:\n%s", metrics)
	}
	cl.Remove(a, &masterpb.RemoveRequest{Key: "k", Force: true})
	if code, _ := call("DELETE", "/api/v1/tenant_quotas?tenant_id=a", ""); code != 200 {
		t.Fatalf("DELETE empty = %d", code)
	}
	if code, _ := call("DELETE", "/api/v1/tenant_quotas?tenant_id=a", ""); code != 404 {
		t.Fatalf("DELETE again = %d", code)
	}
}

// TestTenantsIgnoredWithoutMultiTenancy: without the flag all tenants
// share the default namespace, as upstream.
func TestTenantsIgnoredWithoutMultiTenancy(t *testing.T) {
	cl := startBufconn(t, newTestServer(t, nil))
	c := ctx(t)
	cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c1", Segment: seg("s1", 1<<20)})
	a := asTenant(c, "a")
	ps, _ := cl.PutStart(a, &masterpb.PutStartRequest{ClientId: "c1", Key: "k", Size: 8, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
	if ps.ErrorCode != 0 {
		t.Fatalf("put: %d", ps.ErrorCode)
	}
	cl.PutEnd(a, &masterpb.PutEndRequest{ClientId: "c1", Key: "k"})
	if r, _ := cl.ExistKey(asTenant(c, "b"), &masterpb.KeyRequest{Key: "k"}); !r.Exists {
		t.Fatal("without multi-tenancy, tenant b should see a's key")
	}
}
