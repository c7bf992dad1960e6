package metaserver

import (
	"fmt"
	"io"
)

// Defaults of the store's budget: far above what a deployment publishes
// (two keys of a few KiB per Transfer Engine), so that only a runaway or
// hostile client meets them.
const (
	DefaultMaxKeys  = 1 << 19 // 524 288 keys
	DefaultMaxBytes = 1 << 30 // 1 GiB of keys and values
)

// Limits is the store's budget. A field of 0 or less sets no limit.
type Limits struct {
	// MaxKeys bounds the keys stored.
	MaxKeys int
	// MaxBytes bounds the bytes of every key and value stored together.
	MaxBytes int64
}

// DefaultLimits is DefaultMaxKeys and DefaultMaxBytes.
func DefaultLimits() Limits { return Limits{MaxKeys: DefaultMaxKeys, MaxBytes: DefaultMaxBytes} }

// entryBytes is what one key and its value count against MaxBytes.
func entryBytes(key string, value []byte) int64 { return int64(len(key)) + int64(len(value)) }

// refusal says why storing n value bytes under key does not fit, "" when
// it does: a new key counts its key and value, a replaced one only its
// growth. It counts the refusal. The caller holds s.mu (read or write).
func (s *Server) refusal(key string, n int64) string {
	old, exists := s.store[key]
	if !exists && s.limits.MaxKeys > 0 && len(s.store) >= s.limits.MaxKeys {
		s.refusedKeys.Add(1)
		return fmt.Sprintf("metadata store full: %d keys stored, the server's limit is %d keys", len(s.store), s.limits.MaxKeys)
	}
	growth := int64(len(key)) + n
	if exists {
		growth = n - int64(len(old))
	}
	if s.limits.MaxBytes > 0 && growth > 0 && s.bytes+growth > s.limits.MaxBytes {
		s.refusedBytes.Add(1)
		return fmt.Sprintf("metadata store full: %d bytes stored and %d more asked, the server's limit is %d bytes",
			s.bytes, growth, s.limits.MaxBytes)
	}
	return ""
}

// Usage is the number of keys stored and the bytes of their keys and
// values.
func (s *Server) Usage() (keys int, bytes int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.store), s.bytes
}

// Refused is how many PUTs were refused for the key limit and for the
// byte limit.
func (s *Server) Refused() (keys, bytes uint64) { return s.refusedKeys.Load(), s.refusedBytes.Load() }

// WriteMetrics writes the store's size, limits and refusals in
// Prometheus' text format.
func (s *Server) WriteMetrics(w io.Writer) {
	keys, bytes := s.Usage()
	rk, rb := s.Refused()
	fmt.Fprintf(w, "# HELP mooncake_http_metadata_keys keys stored\n# TYPE mooncake_http_metadata_keys gauge\nmooncake_http_metadata_keys %d\n", keys)
	fmt.Fprintf(w, "# HELP mooncake_http_metadata_bytes bytes of the keys and values stored\n# TYPE mooncake_http_metadata_bytes gauge\nmooncake_http_metadata_bytes %d\n", bytes)
	fmt.Fprintf(w, "# HELP mooncake_http_metadata_max_keys keys the store holds at most (0: no limit)\n# TYPE mooncake_http_metadata_max_keys gauge\nmooncake_http_metadata_max_keys %d\n", max(s.limits.MaxKeys, 0))
	fmt.Fprintf(w, "# HELP mooncake_http_metadata_max_bytes bytes the store holds at most (0: no limit)\n# TYPE mooncake_http_metadata_max_bytes gauge\nmooncake_http_metadata_max_bytes %d\n", max(s.limits.MaxBytes, 0))
	fmt.Fprintf(w, "# HELP mooncake_http_metadata_refused_puts_total PUTs refused with 507 because the store was full\n# TYPE mooncake_http_metadata_refused_puts_total counter\n"+
		"mooncake_http_metadata_refused_puts_total{limit=\"keys\"} %d\nmooncake_http_metadata_refused_puts_total{limit=\"bytes\"} %d\n", rk, rb)
}
