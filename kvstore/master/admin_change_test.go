package master

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAdminChangesComeFromLoopbackByDefault: without tenant tokens nothing
// authenticates an admin caller, so the requests that change state (a
// tenant quota set or deleted, a drain job started) are refused with 403
// from another host's address, served from loopback, and served from
// anywhere with --admin_allow_remote; reads stay open.
func TestAdminChangesComeFromLoopbackByDefault(t *testing.T) {
	changes := []struct{ method, path, body string }{
		{http.MethodPut, "/api/v1/tenant_quotas", `{"tenant_id":"t1","quota_bytes":4096}`},
		{http.MethodDelete, "/api/v1/tenant_quotas?tenant_id=t1", ""},
		{http.MethodPost, "/api/v1/drain_jobs", `{"segment_ids":["s1"]}`},
	}
	call := func(srv *Server, method, path, body, remote string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		srv.AdminHandler().ServeHTTP(rec, req)
		return rec
	}
	multi := func(o *Options) { o.Config.MultiTenant = true }

	srv := newTestServer(t, multi)
	defer srv.Close()
	for _, c := range changes {
		for _, remote := range []string{"192.0.2.7:40000", "[2001:db8::1]:40000"} {
			rec := call(srv, c.method, c.path, c.body, remote)
			if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "--admin_allow_remote") {
				t.Errorf("%s %s from %s = %d %s, want 403 naming --admin_allow_remote", c.method, c.path, remote, rec.Code, rec.Body)
			}
		}
	}
	var quota uint64
	srv.WithState(func(st *State, _ time.Time) {
		if info, code := st.Tenant("t1"); code == 0 {
			quota = info.QuotaBytes
		}
	})
	if quota != 0 {
		t.Fatalf("a refused PUT set the quota to %d", quota)
	}
	for _, path := range []string{"/metrics", "/get_all_segments", "/api/v1/tenant_quotas"} {
		if rec := call(srv, http.MethodGet, path, "", "192.0.2.7:40000"); rec.Code != http.StatusOK {
			t.Errorf("GET %s from another host = %d, want 200 (reads stay open)", path, rec.Code)
		}
	}
	// From loopback the quota change is served (the drain then fails on
	// its unknown segment, which shows it got past the guard).
	if rec := call(srv, changes[0].method, changes[0].path, changes[0].body, "127.0.0.1:40000"); rec.Code != http.StatusOK {
		t.Fatalf("PUT tenant quota from loopback = %d %s", rec.Code, rec.Body)
	}
	if rec := call(srv, changes[2].method, changes[2].path, changes[2].body, "[::1]:40000"); rec.Code != http.StatusNotFound {
		t.Fatalf("POST drain job of an unknown segment from loopback = %d %s, want 404", rec.Code, rec.Body)
	}

	open := newTestServer(t, func(o *Options) { multi(o); o.AdminAllowRemote = true })
	defer open.Close()
	if rec := call(open, changes[0].method, changes[0].path, changes[0].body, "192.0.2.7:40000"); rec.Code != http.StatusOK {
		t.Fatalf("PUT tenant quota from another host with AdminAllowRemote = %d %s", rec.Code, rec.Body)
	}
}

// fromLocalhost gives r a loopback peer (httptest.NewRequest's default,
// 192.0.2.1, is another host's), as a caller on the master's own host has.
func fromLocalhost(r *http.Request) *http.Request {
	r.RemoteAddr = "127.0.0.1:40000"
	return r
}
