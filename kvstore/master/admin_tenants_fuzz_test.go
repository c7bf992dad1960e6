package master

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// fuzzAdminServer is a multi-tenant server with tenant a holding one
// object, with tenant tokens (testTokens) or without.
func fuzzAdminServer(tb testing.TB, tokens bool) *Server {
	opts := Options{Config: DefaultConfig()}
	opts.Config.MultiTenant = true
	if tokens {
		tt, err := ParseTenantTokens(bytes.NewReader([]byte("a " + tokA + "\nb " + tokB + "\n_admin " + tokAdmin + "\n")))
		if err != nil {
			tb.Fatal(err)
		}
		opts.TenantTokens = tt
	}
	srv, err := NewServer(opts)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Unix(1000, 0)
	srv.WithState(func(st *State, _ time.Time) {
		if code := st.MountSegment("c1", Segment{ID: "s1", Name: "n1", Base: 1 << 20, Size: 1 << 20}, now); code != kvstore.OK {
			tb.Fatal(code)
		}
		if code := st.SetTenantQuota("a", 1<<16); code != kvstore.OK {
			tb.Fatal(code)
		}
		key := st.Config().ObjectKey("a", "k")
		if _, code := st.PutStart("c1", key, 64, ReplicateConfig{ReplicaNum: 1}, now); code != kvstore.OK {
			tb.Fatal(code)
		}
		if code := st.PutEnd("c1", key, nil, now); code != kvstore.OK {
			tb.Fatal(code)
		}
	})
	return srv
}

var fuzzAdminMethods = []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodPost, http.MethodPatch, http.MethodHead}

var fuzzAdminPaths = []string{"/api/v1/tenant_quotas", "/get_all_keys", "/query_key", "/health"}

// FuzzAdminTenantRequests sends arbitrary methods, query strings, bodies
// and Authorization headers to the master's tenant endpoints and key
// listings (the admin port's JSON body decoder is PUT
// /api/v1/tenant_quotas). Nothing panics or answers 5xx; a refusal is a
// 4xx with a reason; with tenant tokens, a request without the admin
// token never changes a tenant's quota or registration; a PUT answered
// 200 had exactly one JSON object as its body.
func FuzzAdminTenantRequests(f *testing.F) {
	f.Add(uint8(1), uint8(0), "", []byte(`{"tenant_id":"a","quota_bytes":4096}`), "Bearer "+tokAdmin, true)
	f.Add(uint8(1), uint8(0), "", []byte(`{"tenant_id":"c","quota_bytes":0}`), "", false)
	f.Add(uint8(0), uint8(0), "tenant_id=a", []byte(nil), "Bearer "+tokA, true)
	f.Add(uint8(2), uint8(0), "tenant_id=a", []byte(nil), "Bearer "+tokAdmin, true)
	f.Add(uint8(0), uint8(1), "tenant_id=a", []byte(nil), "bearer "+tokA, true)
	f.Add(uint8(0), uint8(2), "tenant_id=a&key=k", []byte(nil), "", false)
	f.Fuzz(func(t *testing.T, method, path uint8, query string, body []byte, auth string, tokens bool) {
		srv := fuzzAdminServer(t, tokens)
		req := httptest.NewRequest(fuzzAdminMethods[int(method)%len(fuzzAdminMethods)], fuzzAdminPaths[int(path)%len(fuzzAdminPaths)], bytes.NewReader(body))
		req.URL.RawQuery = query
		if auth != "" {
			req.Header["Authorization"] = []string{auth}
		}
		var before, after []TenantInfo
		srv.WithState(func(st *State, _ time.Time) { before = st.Tenants() })
		rec := httptest.NewRecorder()
		srv.AdminHandler().ServeHTTP(rec, req)
		srv.WithState(func(st *State, _ time.Time) { after = st.Tenants() })

		code := rec.Code
		switch {
		case code >= 500:
			t.Fatalf("%s %s?%q answered %d: %s", req.Method, req.URL.Path, query, code, rec.Body.String())
		case code >= 400 && rec.Body.Len() == 0:
			t.Fatalf("%s %s?%q refused with %d and no reason", req.Method, req.URL.Path, query, code)
		case code != http.StatusOK && code < 400:
			t.Fatalf("%s %s?%q answered %d", req.Method, req.URL.Path, query, code)
		}
		if tokens && bearer(req) != tokAdmin && !reflect.DeepEqual(before, after) {
			t.Fatalf("without the admin token %s %s changed the tenants: %+v -> %+v", req.Method, req.URL.Path, before, after)
		}
		if !reflect.DeepEqual(before, after) && code != http.StatusOK {
			t.Fatalf("a refused request (%d) changed the tenants", code)
		}
		if req.Method == http.MethodPut && req.URL.Path == fuzzAdminPaths[0] && code == http.StatusOK {
			dec := json.NewDecoder(bytes.NewReader(body))
			var v map[string]any
			if err := dec.Decode(&v); err != nil || dec.Decode(new(any)) != io.EOF {
				t.Fatalf("PUT accepted a body that is not one JSON object: %q", body)
			}
		}
	})
}

// FuzzParseTenantTokens: the tokens file parser never panics, and what it
// accepts binds only valid tenant ids to tokens of at least 16 printable
// bytes.
func FuzzParseTenantTokens(f *testing.F) {
	f.Add([]byte("a " + tokA + "\n_admin " + tokAdmin + "\n"))
	f.Add([]byte("# c\n\n default\t" + tokB + " \n"))
	f.Add([]byte("a short\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tt, err := ParseTenantTokens(bytes.NewReader(data))
		if err != nil {
			return
		}
		cfg := Config{MultiTenant: true}
		for id, tok := range tt.byTenant {
			if name, code := cfg.ResolveTenant(id); code != kvstore.OK || name != id {
				t.Fatalf("accepted tenant id %q", id)
			}
			if len(tok) < minTokenLen {
				t.Fatalf("accepted token %q", tok)
			}
			if !tt.allowTenant(id, tok) || tt.allowTenant(id, tok+"x") {
				t.Fatalf("token of %q does not match itself only", id)
			}
		}
		if tt.admin != "" && len(tt.admin) < minTokenLen {
			t.Fatalf("accepted admin token %q", tt.admin)
		}
	})
}
