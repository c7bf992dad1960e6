package metaserver

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// FuzzServeHTTP sends arbitrary requests (method, path, key, body) to a
// metadata server that already holds a key, with a small budget: it never
// panics, answers only the statuses it documents, a PUT it accepted is
// what a GET of the key returns, and it never holds more than its budget.
func FuzzServeHTTP(f *testing.F) {
	f.Add("PUT", MetadataPath, "mooncake/ram/a", []byte(`{"name":"a"}`))
	f.Add("PUT", MetadataPath, "mooncake/rpc_meta/a", []byte(`{"ip_or_host_name":"h","rpc_port":1}`))
	f.Add("GET", MetadataPath, "", []byte(nil))
	f.Add("DELETE", MetadataPath, "k", []byte(nil))
	f.Add("POST", HealthPath, "", []byte("x"))
	f.Add("GET", "/other", "k", []byte(nil))
	f.Add("PUT", MetadataPath, "held", []byte("a value that is longer than the budget allows"))
	f.Add("GET", MetricsPath, "", []byte(nil))
	allowed := map[int]bool{200: true, 400: true, 404: true, 405: true, 413: true, 507: true}
	lim := Limits{MaxKeys: 2, MaxBytes: 48}
	f.Fuzz(func(t *testing.T, method, path, key string, body []byte) {
		s := NewLimited(lim)
		s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPut, MetadataPath+"?key=held", bytes.NewReader([]byte("v"))))
		u := &url.URL{Path: path, RawQuery: url.Values{"key": {key}}.Encode()}
		req, err := http.NewRequest(method, "http://127.0.0.1"+u.String(), bytes.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if !allowed[w.Code] {
			t.Fatalf("%s %q key %q: status %d", method, path, key, w.Code)
		}
		if method == http.MethodPut && req.URL.Path == MetadataPath && w.Code == http.StatusOK {
			if v, ok := s.Get(key); !ok || !bytes.Equal(v, body) {
				t.Fatalf("PUT %q stored %q, %v", key, v, ok)
			}
		}
		if keys, n := s.Usage(); keys > lim.MaxKeys || n > lim.MaxBytes {
			t.Fatalf("%s %q key %q: the store holds %d keys and %d bytes", method, path, key, keys, n)
		}
	})
}
