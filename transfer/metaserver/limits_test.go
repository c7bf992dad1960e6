package metaserver

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// call sends one request to a live server and returns the status and body.
func call(t *testing.T, method, u, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
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

func TestAClientCannotStorePastTheBudget(t *testing.T) {
	const maxKeys, maxBytes = 64, 64 << 10
	s := NewLimited(Limits{MaxKeys: maxKeys, MaxBytes: maxBytes})
	hs := httptest.NewServer(s)
	defer hs.Close()
	key := func(i int) string { return hs.URL + metaURL(fmt.Sprintf("mooncake/ram/flood-%d", i)) }

	// A well-behaved engine's descriptor, stored first.
	desc := hs.URL + metaURL("mooncake/ram/10.0.0.1:15000")
	if code, _ := call(t, http.MethodPut, desc, `{"name":"10.0.0.1:15000"}`); code != http.StatusOK {
		t.Fatalf("PUT of a descriptor: %d", code)
	}
	// One client PUTs keys of 512 bytes as fast as it can: it gets as
	// many as the key limit allows, and then 507s.
	value := strings.Repeat("v", 512)
	stored, refused := 0, 0
	for i := range 10 * maxKeys {
		code, body := call(t, http.MethodPut, key(i), value)
		switch {
		case code == http.StatusOK:
			stored++
		case code == http.StatusInsufficientStorage && strings.Contains(body, "metadata store full") &&
			strings.Contains(body, fmt.Sprint(maxKeys)+" keys"):
			refused++
		default:
			t.Fatalf("PUT %d: %d %q", i, code, body)
		}
	}
	if keys, bytes := s.Usage(); stored != maxKeys-1 || keys != maxKeys || bytes > maxBytes {
		t.Fatalf("stored %d of the flood's keys; the store holds %d keys and %d bytes (limits %d, %d)", stored, keys, bytes, maxKeys, maxBytes)
	}
	// Meanwhile the engine reads and replaces its own descriptor: a
	// replacement counts only its growth, so it fits at the key limit.
	if code, body := call(t, http.MethodGet, desc, ""); code != http.StatusOK || body != `{"name":"10.0.0.1:15000"}` {
		t.Fatalf("GET beside the flood: %d %q", code, body)
	}
	if code, body := call(t, http.MethodPut, desc, `{"name":"10.0.0.1:15000","v":2}`); code != http.StatusOK {
		t.Fatalf("replacing a descriptor at the key limit: %d %q", code, body)
	}
	// Bytes: one value that would pass the byte budget is refused even
	// as a replacement, and stores nothing.
	big := strings.Repeat("b", maxBytes)
	if code, body := call(t, http.MethodPut, desc, big); code != http.StatusInsufficientStorage ||
		!strings.Contains(body, fmt.Sprint(maxBytes)+" bytes") {
		t.Fatalf("a value past the byte budget: %d %q", code, body)
	}
	if code, body := call(t, http.MethodGet, desc, ""); code != http.StatusOK || body != `{"name":"10.0.0.1:15000","v":2}` {
		t.Fatalf("the refused replacement changed the value: %d %q", code, body)
	}
	// The refusals are counted in /metrics.
	_, metrics := call(t, http.MethodGet, hs.URL+MetricsPath, "")
	for _, want := range []string{
		fmt.Sprintf("mooncake_http_metadata_refused_puts_total{limit=\"keys\"} %d\n", refused),
		"mooncake_http_metadata_refused_puts_total{limit=\"bytes\"} 1\n",
		fmt.Sprintf("mooncake_http_metadata_keys %d\n", maxKeys),
		fmt.Sprintf("mooncake_http_metadata_max_keys %d\n", maxKeys),
	} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	// What the flood stored is given back by DELETE, and the room it
	// leaves is usable again.
	for i := range maxKeys - 1 {
		if code, _ := call(t, http.MethodDelete, key(i), ""); code != http.StatusOK {
			t.Fatalf("DELETE %d: %d", i, code)
		}
	}
	if keys, bytes := s.Usage(); keys != 1 || bytes != int64(len("mooncake/ram/10.0.0.1:15000")+len(`{"name":"10.0.0.1:15000","v":2}`)) {
		t.Fatalf("after the deletes: %d keys, %d bytes", keys, bytes)
	}
	if code, _ := call(t, http.MethodPut, key(0), value); code != http.StatusOK {
		t.Fatalf("PUT after the deletes: %d", code)
	}
}

func TestABodyThatCannotFitIsRefusedBeforeItIsRead(t *testing.T) {
	s := NewLimited(Limits{MaxBytes: 1 << 10})
	req := httptest.NewRequest(http.MethodPut, metaURL("k"), strings.NewReader(strings.Repeat("x", 4<<10)))
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusInsufficientStorage {
		t.Fatalf("status %d", rec.Code)
	}
	if n, _ := req.Body.Read(make([]byte, 1)); n != 1 {
		t.Fatal("the body was read although its Content-Length could not fit")
	}
	if keys, bytes := s.Usage(); keys != 0 || bytes != 0 {
		t.Fatalf("stored %d keys, %d bytes", keys, bytes)
	}
}

func TestUnlimitedAndDefaults(t *testing.T) {
	if l := New().limits; l != DefaultLimits() || l.MaxKeys < 100_000 || l.MaxBytes < 1<<30 {
		t.Fatalf("defaults %+v", l)
	}
	s := NewLimited(Limits{})
	for i := range 3 {
		do(t, s, step{"PUT", metaURL(fmt.Sprint(i)), "value", 200, "metadata updated"})
	}
	if keys, bytes := s.Usage(); keys != 3 || bytes != 3*(1+5) {
		t.Fatalf("%d keys, %d bytes", keys, bytes)
	}
}

func TestAStoredValueHoldsOnlyItsBytes(t *testing.T) {
	s := New()
	hs := httptest.NewServer(s)
	defer hs.Close()
	for _, n := range []int{0, 1, 511, 16<<10 + 1, 100 << 10} {
		// Chunked, so that the server cannot size its buffer from the
		// Content-Length.
		req, _ := http.NewRequest(http.MethodPut, hs.URL+metaURL("k"), io.MultiReader(strings.NewReader(strings.Repeat("x", n))))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		s.mu.RLock()
		v := s.store["k"]
		s.mu.RUnlock()
		if len(v) != n || cap(v) != n {
			t.Fatalf("a value of %d bytes is stored in %d (len %d)", n, cap(v), len(v))
		}
	}
}
