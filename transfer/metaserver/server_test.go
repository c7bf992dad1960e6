package metaserver

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// step is one request against a Server and the answer expected.
type step struct {
	method, target, body string
	status               int
	want                 string // expected body
}

func do(t *testing.T, h http.Handler, s step) *http.Response {
	t.Helper()
	var body io.Reader
	if s.body != "" {
		body = strings.NewReader(s.body)
	}
	req := httptest.NewRequest(s.method, s.target, body)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != s.status || string(got) != s.want {
		t.Fatalf("%s %s body=%q: got %d %q, want %d %q",
			s.method, s.target, s.body, resp.StatusCode, got, s.status, s.want)
	}
	return resp
}

func metaURL(key string) string { return "/metadata?key=" + url.QueryEscape(key) }

func TestProtocol(t *testing.T) {
	const seg = "mooncake/ram/127.0.0.1:1234"
	const rpc = "mooncake/rpc_meta/127.0.0.1:1234"
	tests := []struct {
		name  string
		steps []step
	}{
		{"get missing", []step{
			{http.MethodGet, metaURL(seg), "", 404, "metadata not found"},
		}},
		{"get without key", []step{
			{http.MethodGet, "/metadata", "", 400, "Missing key parameter"},
		}},
		{"get with empty key", []step{
			{http.MethodGet, "/metadata?key=", "", 400, "Missing key parameter"},
		}},
		{"put without key", []step{
			{http.MethodPut, "/metadata", `{"a":1}`, 400, "Missing key parameter"},
		}},
		{"delete without key", []step{
			{http.MethodDelete, "/metadata", "", 400, "Missing key parameter"},
		}},
		{"put then get", []step{
			{http.MethodPut, metaURL(seg), `{"name":"x"}`, 200, "metadata updated"},
			{http.MethodGet, metaURL(seg), "", 200, `{"name":"x"}`},
		}},
		{"put overwrites segment", []step{
			{http.MethodPut, metaURL(seg), `{"v":1}`, 200, "metadata updated"},
			{http.MethodPut, metaURL(seg), `{"v":2}`, 200, "metadata updated"},
			{http.MethodGet, metaURL(seg), "", 200, `{"v":2}`},
		}},
		{"put empty body", []step{
			{http.MethodPut, metaURL(seg), "", 200, "metadata updated"},
			{http.MethodGet, metaURL(seg), "", 200, ""},
		}},
		{"rpc_meta same body unchanged", []step{
			{http.MethodPut, metaURL(rpc), `{"rpc_port":1}`, 200, "metadata updated"},
			{http.MethodPut, metaURL(rpc), `{"rpc_port":1}`, 200, "metadata unchanged"},
			{http.MethodGet, metaURL(rpc), "", 200, `{"rpc_port":1}`},
		}},
		{"rpc_meta different body refused", []step{
			{http.MethodPut, metaURL(rpc), `{"rpc_port":1}`, 200, "metadata updated"},
			{http.MethodPut, metaURL(rpc), `{"rpc_port":2}`, 400, "Duplicate rpc_meta key not allowed"},
			{http.MethodGet, metaURL(rpc), "", 200, `{"rpc_port":1}`},
		}},
		{"rpc_meta anywhere in key", []step{
			{http.MethodPut, metaURL("x_rpc_meta_y"), `1`, 200, "metadata updated"},
			{http.MethodPut, metaURL("x_rpc_meta_y"), `2`, 400, "Duplicate rpc_meta key not allowed"},
		}},
		{"rpc_meta writable again after delete", []step{
			{http.MethodPut, metaURL(rpc), `1`, 200, "metadata updated"},
			{http.MethodDelete, metaURL(rpc), "", 200, "metadata deleted"},
			{http.MethodPut, metaURL(rpc), `2`, 200, "metadata updated"},
			{http.MethodGet, metaURL(rpc), "", 200, `2`},
		}},
		{"delete", []step{
			{http.MethodPut, metaURL(seg), `{}`, 200, "metadata updated"},
			{http.MethodDelete, metaURL(seg), "", 200, "metadata deleted"},
			{http.MethodGet, metaURL(seg), "", 404, "metadata not found"},
			{http.MethodDelete, metaURL(seg), "", 404, "metadata not found"},
		}},
		{"delete missing", []step{
			{http.MethodDelete, metaURL(seg), "", 404, "metadata not found"},
		}},
		{"key escaping", []step{
			{http.MethodPut, "/metadata?key=a%2Fb%3Ac%20d", `1`, 200, "metadata updated"},
			{http.MethodGet, metaURL("a/b:c d"), "", 200, `1`},
			{http.MethodGet, "/metadata?key=a/b:c+d", "", 200, `1`},
		}},
		{"health", []step{
			{http.MethodGet, "/health", "", 200, "OK"},
		}},
		{"health wrong method", []step{
			{http.MethodPost, "/health", "", 405, "method not allowed"},
		}},
		{"metadata wrong methods", []step{
			{http.MethodPost, metaURL(seg), `{}`, 405, "method not allowed"},
			{http.MethodPatch, metaURL(seg), `{}`, 405, "method not allowed"},
			{http.MethodHead, metaURL(seg), "", 405, "method not allowed"},
			{http.MethodGet, metaURL(seg), "", 404, "metadata not found"},
		}},
		{"unknown path", []step{
			{http.MethodGet, "/other?key=a", "", 404, "not found"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			for _, st := range tc.steps {
				do(t, s, st)
			}
		})
	}
}

func TestHeaders(t *testing.T) {
	s := New()
	do(t, s, step{http.MethodPut, metaURL("k"), `{}`, 200, "metadata updated"})
	resp := do(t, s, step{http.MethodGet, metaURL("k"), "", 200, `{}`})
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET Content-Type = %q, want application/json", ct)
	}
	resp = do(t, s, step{http.MethodPost, metaURL("k"), "", 405, "method not allowed"})
	if a := resp.Header.Get("Allow"); a != "GET, PUT, DELETE" {
		t.Errorf("Allow = %q", a)
	}
}

func TestBodyTooLarge(t *testing.T) {
	s := New()
	req := httptest.NewRequest(http.MethodPut, metaURL("big"), io.LimitReader(zeros{}, MaxBodyBytes+1))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", rec.Code)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after refused put", s.Len())
	}

	// A declared length over the limit is refused before reading.
	req = httptest.NewRequest(http.MethodPut, metaURL("big"), strings.NewReader("x"))
	req.ContentLength = MaxBodyBytes + 1
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || s.Len() != 0 {
		t.Fatalf("declared oversize: status %d, Len %d", rec.Code, s.Len())
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestAccessors(t *testing.T) {
	s := New()
	if s.Len() != 0 {
		t.Fatalf("new server Len = %d", s.Len())
	}
	do(t, s, step{http.MethodPut, metaURL("a"), "1", 200, "metadata updated"})
	do(t, s, step{http.MethodPut, metaURL("b"), "2", 200, "metadata updated"})
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2", s.Len())
	}
	v, ok := s.Get("a")
	if !ok || string(v) != "1" {
		t.Fatalf("Get(a) = %q, %v", v, ok)
	}
	v[0] = 'x' // must not alias the stored value
	if v2, _ := s.Get("a"); string(v2) != "1" {
		t.Fatalf("Get returned an alias of the stored value")
	}
	if !s.Delete("a") || s.Delete("a") {
		t.Fatalf("Delete should report existence once")
	}
	if _, ok := s.Get("a"); ok || s.Len() != 1 {
		t.Fatalf("a still present after Delete")
	}
}

// TestConcurrent exercises the store from many goroutines over real HTTP;
// run with -race.
func TestConcurrent(t *testing.T) {
	s := New()
	ts := httptest.NewServer(s)
	defer ts.Close()

	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				key := fmt.Sprintf("mooncake/ram/w%d-%d", w, i)
				u := ts.URL + metaURL(key)
				req, _ := http.NewRequest(http.MethodPut, u, strings.NewReader(key))
				resp, err := ts.Client().Do(req)
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				resp, err = ts.Client().Get(u)
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != key {
					errs <- fmt.Errorf("GET %s = %q", key, b)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := s.Len(); got != workers*perWorker {
		t.Fatalf("Len = %d, want %d", got, workers*perWorker)
	}
}
