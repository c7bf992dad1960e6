package metadata

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHTTPStoreGetIsBounded: a metadata server that answers a GET with an
// endless body gets an error once the value passes MaxValueBytes; the
// client does not read (and hold) what it sends without end.
func TestHTTPStoreGetIsBounded(t *testing.T) {
	chunk := make([]byte, 1<<20)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for sent := 0; sent <= 2*MaxValueBytes; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer ts.Close()
	s := NewHTTPStore(ts.URL + "/metadata")
	defer s.Close()
	if v, err := s.Get(context.Background(), "k"); err == nil {
		t.Fatalf("a %d-byte value was accepted", len(v))
	}
}
