// Package metaserver implements the upstream Mooncake HTTP metadata server
// protocol: a thread-safe in-memory key-value store that Transfer Engines
// publish their segment descriptors and RPC addresses in.
//
// The protocol is that of upstream's C++ server
// (mooncake-store/src/http_metadata_server.cpp):
//
//	GET    /metadata?key=K  200 stored body, 404 "metadata not found"
//	PUT    /metadata?key=K  200 "metadata updated"
//	DELETE /metadata?key=K  200 "metadata deleted", 404 "metadata not found"
//	GET    /health          200 "OK"
//
// A missing or empty key parameter is answered with 400, and any other
// method on a known path with 405. A key containing "rpc_meta" is written
// once: putting it again with the same body answers 200 "metadata unchanged",
// with a different body 400.
//
// Ours: the store holds at most Limits.MaxKeys keys and Limits.MaxBytes
// bytes of keys and values; a PUT beyond either is answered with 507
// Insufficient Storage and a body that names the limit, and stores
// nothing. GET /metrics gives the store's size, its limits and those
// refusals in Prometheus' text format.
//
// The package depends on the standard library only, so that both the
// standalone mooncake_http_metadata_server binary and the KV master can
// serve it.
package metaserver

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// Paths served by a Server.
const (
	MetadataPath = "/metadata"
	HealthPath   = "/health"
	MetricsPath  = "/metrics"
)

// MaxBodyBytes bounds the body of a PUT; a larger one is answered with 413.
// Segment descriptors are a few KiB, so this only guards against misuse.
const MaxBodyBytes = 64 << 20

// rpcMetaMarker marks keys that may not be overwritten with a different
// value, as upstream does for "mooncake/rpc_meta/<server>" entries.
const rpcMetaMarker = "rpc_meta"

// Server is an http.Handler serving the metadata protocol from memory. The
// zero value is not usable; create one with New. It is safe for concurrent
// use.
type Server struct {
	limits Limits

	mu    sync.RWMutex
	store map[string][]byte
	bytes int64 // of every key and value in store

	refusedKeys, refusedBytes atomic.Uint64
}

// New returns an empty Server with DefaultLimits.
func New() *Server { return NewLimited(DefaultLimits()) }

// NewLimited returns an empty Server that holds at most what lim allows.
func NewLimited(lim Limits) *Server {
	return &Server{limits: lim, store: make(map[string][]byte)}
}

// Len returns the number of stored keys.
func (s *Server) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.store)
}

// Get returns a copy of the value stored under key and whether it exists.
func (s *Server) Get(key string) ([]byte, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.store[key]
	if !ok {
		return nil, false
	}
	return bytes.Clone(v), true
}

// Delete removes key and reports whether it existed. It lets an embedding
// service (the KV master) drop the metadata of a segment it knows is gone.
func (s *Server) Delete(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.store[key]
	if ok {
		delete(s.store, key)
		s.bytes -= entryBytes(key, v)
	}
	return ok
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case MetadataPath:
		switch r.Method {
		case http.MethodGet:
			s.serveGet(w, r)
		case http.MethodPut:
			s.servePut(w, r)
		case http.MethodDelete:
			s.serveDelete(w, r)
		default:
			w.Header().Set("Allow", "GET, PUT, DELETE")
			reply(w, http.StatusMethodNotAllowed, "method not allowed")
		}
	case HealthPath:
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			reply(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		reply(w, http.StatusOK, "OK")
	case MetricsPath:
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			reply(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.WriteMetrics(w)
	default:
		reply(w, http.StatusNotFound, "not found")
	}
}

func (s *Server) serveGet(w http.ResponseWriter, r *http.Request) {
	key, ok := keyParam(w, r)
	if !ok {
		return
	}
	v, found := s.Get(key)
	if !found {
		reply(w, http.StatusNotFound, "metadata not found")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(v)
}

func (s *Server) servePut(w http.ResponseWriter, r *http.Request) {
	key, ok := keyParam(w, r)
	if !ok {
		return
	}
	if r.ContentLength > MaxBodyBytes {
		reply(w, http.StatusRequestEntityTooLarge, "metadata too large")
		return
	}
	if r.ContentLength > 0 {
		// Refused before the body is read when it cannot fit.
		s.mu.RLock()
		msg := s.refusal(key, r.ContentLength)
		s.mu.RUnlock()
		if msg != "" {
			reply(w, http.StatusInsufficientStorage, msg)
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			reply(w, http.StatusRequestEntityTooLarge, "metadata too large")
			return
		}
		reply(w, http.StatusBadRequest, "cannot read body: "+err.Error())
		return
	}
	if cap(body) > len(body) {
		// ReadAll's buffer grows ahead of the bytes; the budget counts
		// what is stored, so store no more than the bytes.
		body = append(make([]byte, 0, len(body)), body...)
	}

	s.mu.Lock()
	old, exists := s.store[key]
	if exists && strings.Contains(key, rpcMetaMarker) {
		s.mu.Unlock()
		if bytes.Equal(old, body) {
			reply(w, http.StatusOK, "metadata unchanged")
		} else {
			reply(w, http.StatusBadRequest, "Duplicate rpc_meta key not allowed")
		}
		return
	}
	if msg := s.refusal(key, int64(len(body))); msg != "" {
		s.mu.Unlock()
		reply(w, http.StatusInsufficientStorage, msg)
		return
	}
	if exists {
		s.bytes -= entryBytes(key, old)
	}
	s.store[key] = body
	s.bytes += entryBytes(key, body)
	s.mu.Unlock()
	reply(w, http.StatusOK, "metadata updated")
}

func (s *Server) serveDelete(w http.ResponseWriter, r *http.Request) {
	key, ok := keyParam(w, r)
	if !ok {
		return
	}
	if !s.Delete(key) {
		reply(w, http.StatusNotFound, "metadata not found")
		return
	}
	reply(w, http.StatusOK, "metadata deleted")
}

// keyParam returns the key query parameter, answering 400 when it is missing
// or empty.
func keyParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.URL.Query().Get("key")
	if key == "" {
		reply(w, http.StatusBadRequest, "Missing key parameter")
		return "", false
	}
	return key, true
}

func reply(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}
