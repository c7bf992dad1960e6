package client

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// resetTraceSinks closes the process-wide sinks and forgets the JSONL
// file, for a test that sets them itself.
func resetTraceSinks(t *testing.T) {
	t.Helper()
	s := &traceSinks
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jsonl != nil {
		s.jsonl.Close()
	}
	s.jsonl, s.path = nil, ""
	s.status() // resets open
}

// tracingCall sends method /tracing?query (with an optional form body)
// to the metrics server's routes and returns the status and the state or
// error it answered.
func tracingCall(t *testing.T, method, query, form string) (int, map[string]any) {
	t.Helper()
	mux := http.NewServeMux()
	tracingRoutes(mux)
	req := httptest.NewRequest(method, "/tracing?"+query, strings.NewReader(form))
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	var body map[string]any
	if rec.Header().Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s /tracing?%s: %d %q: %v", method, query, rec.Code, rec.Body.String(), err)
		}
	}
	return rec.Code, body
}

// TestTracingEndpointNeverOpensARequestedFile is issue 33 #8: GET
// /tracing?enabled=on&file=PATH created and appended to any path. Now a
// GET only reads the state, a POST only switches the sink fixed at setup
// on or off, and no file named by a request is created.
func TestTracingEndpointNeverOpensARequestedFile(t *testing.T) {
	resetTraceSinks(t)
	t.Cleanup(func() { resetTraceSinks(t) })
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "victim.jsonl")
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	relName := "mc-tracing-escape-" + filepath.Base(dir) + ".jsonl"
	relative := filepath.Join(wd, "..", relName)
	requested := map[string]string{"relative": "../" + relName, "absolute": outside, "symlink": link, "plain": "plain.jsonl"}
	noneCreated := func(when string) {
		t.Helper()
		for _, p := range []string{relative, outside, filepath.Join(wd, "plain.jsonl"), filepath.Join(dir, "plain.jsonl")} {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Fatalf("%s: %s exists (%v)", when, p, err)
			}
		}
	}

	// No sink configured: on has nothing to open.
	if code, body := tracingCall(t, "POST", "enabled=on", ""); code != http.StatusConflict || !strings.Contains(body["error"].(string), "MC_STORE_RS_TRACE_JSONL_FILE") {
		t.Fatalf("on without a configured sink: %d %v", code, body)
	}
	for name, p := range requested {
		q := "enabled=on&file=" + url.QueryEscape(p)
		if code, _ := tracingCall(t, "GET", q, ""); code != http.StatusMethodNotAllowed {
			t.Fatalf("GET %s file: %d, want 405", name, code)
		}
		if code, _ := tracingCall(t, "POST", q, ""); code != http.StatusBadRequest {
			t.Fatalf("POST %s file in the query: %d, want 400", name, code)
		}
		if code, _ := tracingCall(t, "POST", "", q); code != http.StatusBadRequest {
			t.Fatalf("POST %s file in the body: %d, want 400", name, code)
		}
	}
	noneCreated("no sink")

	// The sink fixed at setup can be switched off and on, by POST only.
	fixed := filepath.Join(dir, "fixed.jsonl")
	if _, err := InitTracing(TraceSettings{JSONLFile: fixed}); err != nil {
		t.Fatal(err)
	}
	if code, body := tracingCall(t, "GET", "", ""); code != http.StatusOK || body["jsonl_file"] != fixed {
		t.Fatalf("GET state: %d %v", code, body)
	}
	if code, _ := tracingCall(t, "GET", "enabled=off", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET enabled=off: %d, want 405", code)
	}
	if code, _ := tracingCall(t, "PUT", "enabled=off", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT enabled=off: %d, want 405", code)
	}
	if _, body := tracingCall(t, "GET", "", ""); body["jsonl_file"] != fixed {
		t.Fatalf("a GET switched tracing: %v", body)
	}
	for name, p := range requested {
		if code, _ := tracingCall(t, "POST", "enabled=on&file="+url.QueryEscape(p), ""); code != http.StatusBadRequest {
			t.Fatalf("POST %s file with a sink: %d, want 400", name, code)
		}
	}
	if code, body := tracingCall(t, "POST", "", "enabled=off"); code != http.StatusOK || body["jsonl_file"] != "" {
		t.Fatalf("POST off: %d %v", code, body)
	}
	if code, body := tracingCall(t, "POST", "enabled=on", ""); code != http.StatusOK || body["jsonl_file"] != fixed {
		t.Fatalf("POST on: %d %v", code, body)
	}
	if code, _ := tracingCall(t, "POST", "enabled=maybe", ""); code != http.StatusBadRequest {
		t.Fatalf("POST enabled=maybe: %d, want 400", code)
	}
	noneCreated("with a sink")
}
