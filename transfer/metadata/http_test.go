package metadata

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/transfer/errcode"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/transfer/metaserver"
)

// startMetaserver serves a fresh metaserver and returns it with the store
// URL ("http://127.0.0.1:P/metadata").
func startMetaserver(t *testing.T) (*metaserver.Server, string) {
	t.Helper()
	ms := metaserver.New()
	ts := httptest.NewServer(ms)
	t.Cleanup(ts.Close)
	return ms, ts.URL + metaserver.MetadataPath
}

func TestHTTPStore(t *testing.T) {
	ms, u := startMetaserver(t)
	s := NewHTTPStore(u)
	defer s.Close()
	ctx := context.Background()
	const key = "mooncake/ram/127.0.0.1:1234"

	_, err := s.Get(ctx, key)
	if !errors.Is(err, ErrNotFound) || errcode.Of(err) != errcode.Metadata {
		t.Fatalf("Get missing: err = %v, want ErrNotFound with code %d", err, errcode.Metadata)
	}

	v := []byte(`{"name":"127.0.0.1:1234","protocol":"tcp"}`)
	if err := s.Put(ctx, key, v); err != nil {
		t.Fatalf("Put: %v", err)
	}
	// The server holds it under the unescaped key.
	if stored, ok := ms.Get(key); !ok || string(stored) != string(v) {
		t.Fatalf("server has %q, %v under %q", stored, ok, key)
	}
	got, err := s.Get(ctx, key)
	if err != nil || string(got) != string(v) {
		t.Fatalf("Get = %q, %v; want %q", got, err, v)
	}

	if err := s.Put(ctx, key, []byte(`{"v":2}`)); err != nil {
		t.Fatalf("Put overwrite: %v", err)
	}
	if got, _ := s.Get(ctx, key); string(got) != `{"v":2}` {
		t.Fatalf("Get after overwrite = %q", got)
	}

	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete missing: %v, want nil", err)
	}
	if ms.Len() != 0 {
		t.Fatalf("server Len = %d after Delete", ms.Len())
	}
}

func TestHTTPStoreKeyEscaping(t *testing.T) {
	ms, u := startMetaserver(t)
	s := NewHTTPStore(u)
	defer s.Close()
	ctx := context.Background()
	for _, key := range []string{
		"mooncake/ram/127.0.0.1:1234",
		"mooncake/cluster a/ram/x+y&z=1?#%",
		"mooncake/ram/[::1]:80",
		"ключ/юникод",
	} {
		val := []byte(fmt.Sprintf("%q", key))
		if err := s.Put(ctx, key, val); err != nil {
			t.Fatalf("Put %q: %v", key, err)
		}
		if stored, ok := ms.Get(key); !ok || string(stored) != string(val) {
			t.Fatalf("server does not hold %q as is", key)
		}
		if got, err := s.Get(ctx, key); err != nil || string(got) != string(val) {
			t.Fatalf("Get %q = %q, %v", key, got, err)
		}
	}
	if got := s.keyURL("a b+c/d"); got != u+"?key=a%20b%2Bc%2Fd" {
		t.Fatalf("keyURL = %q", got)
	}
}

func TestHTTPStoreRPCMetaOverwriteRefused(t *testing.T) {
	_, u := startMetaserver(t)
	s := NewHTTPStore(u)
	defer s.Close()
	ctx := context.Background()
	const key = "mooncake/rpc_meta/127.0.0.1:1234"

	if err := s.Put(ctx, key, []byte(`{"rpc_port":1}`)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	// The same value again is accepted ("metadata unchanged").
	if err := s.Put(ctx, key, []byte(`{"rpc_port":1}`)); err != nil {
		t.Fatalf("Put same value: %v", err)
	}
	err := s.Put(ctx, key, []byte(`{"rpc_port":2}`))
	if err == nil {
		t.Fatal("Put of a different rpc_meta value succeeded")
	}
	if errcode.Of(err) != errcode.Metadata || !strings.Contains(err.Error(), "400") ||
		!strings.Contains(err.Error(), "Duplicate rpc_meta key not allowed") || !errors.Is(err, ErrNameTaken) {
		t.Fatalf("refusal error = %v; want code %d with status and body", err, errcode.Metadata)
	}
	if got, _ := s.Get(ctx, key); string(got) != `{"rpc_port":1}` {
		t.Fatalf("rpc_meta value changed to %q", got)
	}
}

func TestHTTPStoreServerError(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer ts.Close()
	s := NewHTTPStore(ts.URL + "/metadata")
	defer s.Close()
	ctx := context.Background()
	_, err := s.Get(ctx, "k")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "500") ||
		!strings.Contains(err.Error(), "boom") {
		t.Fatalf("Get on 500: %v", err)
	}
	if err := s.Put(ctx, "k", []byte("v")); err == nil {
		t.Fatal("Put on 500 succeeded")
	}
	if err := s.Delete(ctx, "k"); err == nil {
		t.Fatal("Delete on 500 succeeded")
	}
}

func TestHTTPStoreServerDown(t *testing.T) {
	port := testutil.FreePorts(t, 1)[0] // nothing listens there
	s := NewHTTPStore(fmt.Sprintf("http://127.0.0.1:%d/metadata", port))
	defer s.Close()
	ctx := context.Background()
	start := time.Now()
	if _, err := s.Get(ctx, "k"); err == nil || errors.Is(err, ErrNotFound) || errcode.Of(err) != errcode.Metadata {
		t.Fatalf("Get on a down server: %v", err)
	}
	if err := s.Put(ctx, "k", []byte("v")); err == nil {
		t.Fatal("Put on a down server succeeded")
	}
	if err := s.Delete(ctx, "k"); err == nil {
		t.Fatal("Delete on a down server succeeded")
	}
	if d := time.Since(start); d > 3*httpMetadataTimeout {
		t.Fatalf("three calls on a down server took %v", d)
	}
}

func TestHTTPStoreTimeout(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer ts.Close()
	defer close(release)
	s := NewHTTPStore(ts.URL + "/metadata")
	defer s.Close()

	// The caller's deadline bounds a hung server.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Get(ctx, "k"); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get on a hung server: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Get with 200ms deadline took %v", d)
	}

	// Without one, the store's own 3 s timeout does.
	start = time.Now()
	if _, err := s.Get(context.Background(), "k"); err == nil {
		t.Fatal("Get on a hung server succeeded")
	}
	if d := time.Since(start); d < httpMetadataTimeout-100*time.Millisecond || d > httpMetadataTimeout+2*time.Second {
		t.Fatalf("Get on a hung server returned after %v, want about %v", d, httpMetadataTimeout)
	}
}

func TestHTTPStoreOpenStore(t *testing.T) {
	_, u := startMetaserver(t)
	conn, err := ParseConn(u)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Open(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	hs, ok := ms.(*HTTPStore)
	if !ok || hs.URL() != u {
		t.Fatalf("Open(%q) = %T %v", u, ms, ms)
	}
}
