package master

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

const (
	tokA     = "token-of-tenant-a-0123456789"
	tokB     = "token-of-tenant-b-0123456789"
	tokAdmin = "token-of-the-admin-012345678"
)

func testTokens(t *testing.T) *TenantTokens {
	t.Helper()
	tt, err := ParseTenantTokens(strings.NewReader("# tenants\n\na " + tokA + "\n  b\t" + tokB + "  \n_admin " + tokAdmin + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return tt
}

func TestParseTenantTokens(t *testing.T) {
	tt := testTokens(t)
	if tt.Tenants() != 2 || !tt.allowTenant("a", tokA) || tt.allowTenant("a", tokB) || tt.allowTenant("c", "") ||
		!tt.isAdmin(tokAdmin) || tt.isAdmin(tokA) || tt.isAdmin("") {
		t.Fatalf("parsed tokens do not bind tenants to their tokens: %+v", tt)
	}
	for _, bad := range []string{
		"",                                 // no token
		"# only a comment\n",               // no token
		"a short\n",                        // token too short
		"a " + tokA + " extra\n",           // three fields
		"a\n",                              // no token
		"_x " + tokA + "\n",                // invalid tenant id
		"a " + tokA + "\na " + tokB + "\n", // twice
		"_admin " + tokA + "\n_admin " + tokB + "\n",
		"a token-with-\x01-control-byte\n",
		"a " + strings.Repeat("x", maxTokensFile) + "\n", // past the size bound
	} {
		if _, err := ParseTenantTokens(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseTenantTokens(%.40q) accepted it", bad)
		}
	}
	// "default" and "" both name the default tenant.
	if tt, err := ParseTenantTokens(strings.NewReader("default " + tokA)); err != nil || !tt.allowTenant(DefaultTenant, tokA) {
		t.Fatalf("default tenant's token: %v", err)
	}
}

func TestLoadTenantTokensRefusesAWorldReadableFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("a "+tokA+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTenantTokens(p); err == nil {
		t.Fatal("a file mode 0644 was accepted")
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if tt, err := LoadTenantTokens(p); err != nil || !tt.allowTenant("a", tokA) {
		t.Fatalf("mode 0640: %v", err)
	}
}

func TestTenantTokensNeedMultiTenancy(t *testing.T) {
	if _, err := NewServer(Options{Config: DefaultConfig(), TenantTokens: testTokens(t)}); err == nil {
		t.Fatal("tenant tokens were accepted without multi-tenancy")
	}
}

// asTenantWithToken is asTenant with a tenant token, as a client with
// MC_TENANT_TOKEN sends it.
func asTenantWithToken(c context.Context, tenant, token string) context.Context {
	return metadata.AppendToOutgoingContext(c, kvstore.TenantMetadataKey, tenant, kvstore.TenantTokenMetadataKey, token)
}

// With tenant tokens, a client that names tenant a without a's token
// (none, b's, or a guess) can neither see, read nor remove a's objects;
// without tokens configured any client may name a (upstream).
func TestTenantTokensKeepOtherClientsOut(t *testing.T) {
	srv := newTestServer(t, func(o *Options) {
		o.Config.MultiTenant = true
		o.TenantTokens = testTokens(t)
	})
	cl := startBufconn(t, srv)
	c := withSecret(ctx(t), secretA) // tenant tokens require client secrets
	if r, err := cl.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c1", Segment: seg("s1", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	for _, id := range []string{"a", "b"} {
		var code kvstore.ErrorCode
		srv.WithState(func(st *State, _ time.Time) { code = st.SetTenantQuota(id, 0) })
		if code != kvstore.OK {
			t.Fatal(code)
		}
	}
	a := asTenantWithToken(c, "a", tokA)
	ps, err := cl.PutStart(a, &masterpb.PutStartRequest{ClientId: "c1", Key: "k", Size: 64, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
	if err != nil || ps.ErrorCode != 0 {
		t.Fatalf("a's put with its token: %v %v", ps, err)
	}
	if r, err := cl.PutEnd(a, &masterpb.PutEndRequest{ClientId: "c1", Key: "k"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("a's put end: %v %v", r, err)
	}
	illegal := int32(kvstore.IllegalClient)
	for name, imp := range map[string]context.Context{
		"no token":          asTenant(c, "a"),
		"b's token":         asTenantWithToken(c, "a", tokB),
		"the admin's token": asTenantWithToken(c, "a", tokAdmin),
		"a prefix of a's":   asTenantWithToken(c, "a", tokA[:len(tokA)-1]),
	} {
		if r, _ := cl.GetReplicaList(imp, &masterpb.KeyRequest{Key: "k"}); r.GetErrorCode() != illegal || len(r.GetReplicas()) != 0 {
			t.Errorf("%s: GetReplicaList of a's key = %v, want ILLEGAL_CLIENT", name, r)
		}
		if r, _ := cl.ExistKey(imp, &masterpb.KeyRequest{Key: "k"}); r.GetErrorCode() != illegal || r.GetExists() {
			t.Errorf("%s: ExistKey = %v, want ILLEGAL_CLIENT", name, r)
		}
		if r, _ := cl.Remove(imp, &masterpb.RemoveRequest{Key: "k", Force: true}); r.GetErrorCode() != illegal {
			t.Errorf("%s: Remove = %v, want ILLEGAL_CLIENT", name, r)
		}
		if r, _ := cl.BatchRemove(imp, &masterpb.BatchRemoveRequest{Keys: []string{"k"}, Force: true}); len(r.GetErrorCodes()) != 1 || r.GetErrorCodes()[0] != illegal {
			t.Errorf("%s: BatchRemove = %v, want ILLEGAL_CLIENT", name, r)
		}
		if r, _ := cl.RemoveAll(imp, &masterpb.RemoveAllRequest{Force: true}); r.GetErrorCode() != illegal || r.GetCount() != 0 {
			t.Errorf("%s: RemoveAll = %v, want ILLEGAL_CLIENT", name, r)
		}
		if r, _ := cl.RemoveByRegex(imp, &masterpb.RemoveByRegexRequest{Pattern: ".*", Force: true}); r.GetErrorCode() != illegal || r.GetCount() != 0 {
			t.Errorf("%s: RemoveByRegex = %v, want ILLEGAL_CLIENT", name, r)
		}
		if r, _ := cl.PutStart(imp, &masterpb.PutStartRequest{ClientId: "c2", Key: "k2", Size: 64, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}}); r.GetErrorCode() != illegal {
			t.Errorf("%s: PutStart = %v, want ILLEGAL_CLIENT", name, r)
		}
	}
	// The default tenant has no token in the file: nobody may use it.
	if r, _ := cl.ExistKey(c, &masterpb.KeyRequest{Key: "k"}); r.GetErrorCode() != illegal {
		t.Errorf("default tenant without a token: %v, want ILLEGAL_CLIENT", r)
	}
	// b with its own token works in its own namespace only.
	if r, _ := cl.RemoveAll(asTenantWithToken(c, "b", tokB), &masterpb.RemoveAllRequest{Force: true}); r.GetErrorCode() != 0 || r.GetCount() != 0 {
		t.Errorf("b's RemoveAll = %v", r)
	}
	if r, _ := cl.GetReplicaList(a, &masterpb.KeyRequest{Key: "k"}); r.GetErrorCode() != 0 || len(r.GetReplicas()) != 1 {
		t.Fatalf("a lost its object: %v", r)
	}
}

// The admin port's tenant endpoints and key listings need a Bearer token
// when tokens are configured: the admin's for everything, a tenant's own
// for reading its own quota and keys.
func TestTenantTokensOnTheAdminPort(t *testing.T) {
	srv := newTestServer(t, func(o *Options) {
		o.Config.MultiTenant = true
		o.TenantTokens = testTokens(t)
	})
	h := srv.AdminHandler()
	do := func(method, target, token, body string) int {
		req := httptest.NewRequest(method, target, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	const put = `{"tenant_id":"a","quota_bytes":4096}`
	for _, c := range []struct {
		method, target, token, body string
		want                        int
	}{
		{"PUT", "/api/v1/tenant_quotas", "", put, http.StatusUnauthorized},
		{"PUT", "/api/v1/tenant_quotas", tokA, put, http.StatusUnauthorized},
		{"PUT", "/api/v1/tenant_quotas", tokAdmin, put, http.StatusOK},
		{"GET", "/api/v1/tenant_quotas", tokA, "", http.StatusUnauthorized},
		{"GET", "/api/v1/tenant_quotas", tokAdmin, "", http.StatusOK},
		{"GET", "/api/v1/tenant_quotas?tenant_id=a", tokA, "", http.StatusOK},
		{"GET", "/api/v1/tenant_quotas?tenant_id=a", tokB, "", http.StatusUnauthorized},
		{"DELETE", "/api/v1/tenant_quotas?tenant_id=a", tokA, "", http.StatusUnauthorized},
		{"GET", "/get_all_keys?tenant_id=a", "", "", http.StatusUnauthorized},
		{"GET", "/get_all_keys?tenant_id=a", tokB, "", http.StatusUnauthorized},
		{"GET", "/get_all_keys?tenant_id=a", tokA, "", http.StatusOK},
		{"GET", "/get_all_keys?tenant_id=a", tokAdmin, "", http.StatusOK},
		{"GET", "/get_all_keys?tenant_id=_x", tokA, "", http.StatusUnauthorized},
		{"GET", "/get_all_keys?tenant_id=_x", tokAdmin, "", http.StatusBadRequest},
		{"GET", "/query_key?tenant_id=a&key=k", tokB, "", http.StatusUnauthorized},
		{"GET", "/query_key?tenant_id=a&key=k", tokA, "", http.StatusNotFound},
		{"GET", "/health", "", "", http.StatusOK},
		{"DELETE", "/api/v1/tenant_quotas?tenant_id=a", tokAdmin, "", http.StatusOK},
	} {
		if got := do(c.method, c.target, c.token, c.body); got != c.want {
			t.Errorf("%s %s with %q = %d, want %d", c.method, c.target, c.token, got, c.want)
		}
	}
}

// A PUT /api/v1/tenant_quotas body must be one JSON object: one with data
// after it (two objects, or trailing bytes) was applied as its first part.
func TestTenantQuotaBodyIsOneObject(t *testing.T) {
	srv := newTestServer(t, func(o *Options) { o.Config.MultiTenant = true })
	h := srv.AdminHandler()
	for _, body := range []string{
		`{"tenant_id":"c","quota_bytes":1} x`,
		`{"tenant_id":"c","quota_bytes":1}{"tenant_id":"d","quota_bytes":2}`,
		`{"tenant_id":"c","quota_bytes":-1}`,
		`{"tenant_id":"c","quota_bytes":18446744073709551616}`,
		`{"tenant_id":"c"}`,
		`[1]`,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, fromLocalhost(httptest.NewRequest("PUT", "/api/v1/tenant_quotas", strings.NewReader(body))))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("PUT %s = %d, want 400", body, rec.Code)
		}
	}
	var code kvstore.ErrorCode
	srv.WithState(func(st *State, _ time.Time) { _, code = st.Tenant("c") })
	if code != kvstore.TenantNotRegistered {
		t.Fatalf("a refused body registered tenant c (%v)", code)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, fromLocalhost(httptest.NewRequest("PUT", "/api/v1/tenant_quotas", strings.NewReader(`{"tenant_id":"c","quota_bytes":1}`+"\n"))))
	if rec.Code != http.StatusOK {
		t.Fatalf("a well-formed PUT = %d %s", rec.Code, rec.Body)
	}
}

// Over the framed transport (the clients' default) the token travels in
// the connection's hello like the tenant id, and is checked the same way.
func TestTenantTokensOverFramedCalls(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MultiTenant = true
	svc, err := StartService(ServiceConfig{RPCAddress: "127.0.0.1:0", Server: Options{Config: cfg, TenantTokens: testTokens(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	svc.Server.WithState(func(st *State, _ time.Time) {
		if code := st.SetTenantQuota("a", 0); code != kvstore.OK {
			t.Fatal(code)
		}
	})
	dial := func(md map[string]string) masterpb.MasterClient {
		fc, err := framedrpc.Dial(context.Background(), svc.RPCAddr(), framedrpc.Options{Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fc.Close() })
		return masterpb.NewMasterClient(fc)
	}
	// Tenant tokens require client secrets; both send the same one, so
	// that only the tenant token tells them apart.
	owner := dial(map[string]string{kvstore.TenantMetadataKey: "a", kvstore.TenantTokenMetadataKey: tokA, kvstore.ClientSecretMetadataKey: secretA})
	other := dial(map[string]string{kvstore.TenantMetadataKey: "a", kvstore.TenantTokenMetadataKey: tokB, kvstore.ClientSecretMetadataKey: secretA})
	c := ctx(t)
	if r, err := owner.MountSegment(c, &masterpb.MountSegmentRequest{ClientId: "c", Segment: seg("s", 1<<20)}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	if r, err := owner.PutStart(c, &masterpb.PutStartRequest{ClientId: "c", Key: "k", Size: 100, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("put start: %v %v", r, err)
	}
	if r, err := owner.PutEnd(c, &masterpb.PutEndRequest{ClientId: "c", Key: "k"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("put end: %v %v", r, err)
	}
	if r, err := other.GetReplicaList(c, &masterpb.KeyRequest{Key: "k"}); err != nil || r.ErrorCode != int32(kvstore.IllegalClient) {
		t.Fatalf("framed read with b's token: %v %v, want ILLEGAL_CLIENT", r, err)
	}
	if r, err := other.Remove(c, &masterpb.RemoveRequest{Key: "k", Force: true}); err != nil || r.ErrorCode != int32(kvstore.IllegalClient) {
		t.Fatalf("framed remove with b's token: %v %v, want ILLEGAL_CLIENT", r, err)
	}
	if r, err := owner.GetReplicaList(c, &masterpb.KeyRequest{Key: "k"}); err != nil || r.ErrorCode != 0 {
		t.Fatalf("the owner lost its object: %v %v", r, err)
	}
}
