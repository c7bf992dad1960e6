package standalone

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/mooncake-go/mooncake/internal/procmetrics"
)

// labelled is one scope's counters and the label that names it (`scope="x"`,
// or "" when a dummy reports its own scope).
type labelled struct {
	label string
	c     *scopeCounters
}

// writeScopeMetrics writes hot cache counters, each metric family's
// samples together as the text format requires.
func writeScopeMetrics(w io.Writer, scopes []labelled) {
	families := []struct {
		name, help, kind string
		v                func(*scopeCounters) uint64
	}{
		{"mooncake_hot_cache_enabled", "1 when the scope has a hot cache", "gauge", func(c *scopeCounters) uint64 { return b2u(c.Enabled) }},
		{"mooncake_hot_cache_shared", "1 when the cache is shared memory that dummies map", "gauge", func(c *scopeCounters) uint64 { return b2u(c.Shared) }},
		{"mooncake_hot_cache_block_bytes", "largest object the cache holds", "gauge", func(c *scopeCounters) uint64 { return c.BlockSize }},
		{"mooncake_hot_cache_hits_total", "reads the daemon served from the cache", "counter", func(c *scopeCounters) uint64 { return c.Hits }},
		{"mooncake_hot_cache_misses_total", "reads the daemon looked up and missed", "counter", func(c *scopeCounters) uint64 { return c.Misses }},
		{"mooncake_hot_cache_fills_total", "objects copied into the cache after a read", "counter", func(c *scopeCounters) uint64 { return c.Fills }},
		{"mooncake_hot_cache_invalidations_total", "entries dropped by writes and removes", "counter", func(c *scopeCounters) uint64 { return c.Invalidations }},
		{"mooncake_hot_cache_bypasses_total", "reads of objects larger than a block (not cached)", "counter", func(c *scopeCounters) uint64 { return c.Bypasses }},
	}
	for _, f := range families {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.kind)
		for _, s := range scopes {
			lb := ""
			if s.label != "" {
				lb = "{" + s.label + "}"
			}
			fmt.Fprintf(w, "%s%s %d\n", f.name, lb, f.v(s.c))
		}
	}
}

// MetricsText is the daemon's metrics in Prometheus' text format: dummy
// sessions, calls, every scope's hot cache counters, and its real
// client's Transfer Engine counters.
func (s *Server) MetricsText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP mooncake_client_dummy_sessions dummy clients connected\n# TYPE mooncake_client_dummy_sessions gauge\nmooncake_client_dummy_sessions %d\n", s.Sessions())
	fmt.Fprintf(&b, "# HELP mooncake_client_dummy_requests_total calls dummies made\n# TYPE mooncake_client_dummy_requests_total counter\nmooncake_client_dummy_requests_total %d\n", s.requests.Load())
	fmt.Fprintf(&b, "# HELP mooncake_client_dummy_request_failures_total calls that failed as a whole\n# TYPE mooncake_client_dummy_request_failures_total counter\nmooncake_client_dummy_request_failures_total %d\n", s.failures.Load())
	fmt.Fprintf(&b, "# HELP mooncake_client_refused_connections_total connections refused at accept (a user not allowed)\n# TYPE mooncake_client_refused_connections_total counter\nmooncake_client_refused_connections_total %d\n", s.Refused())
	rq := s.Requests()
	fmt.Fprintf(&b, "# HELP mooncake_client_dummy_requests_in_flight dummy calls being served now (bounded by --max_requests_in_flight)\n# TYPE mooncake_client_dummy_requests_in_flight gauge\nmooncake_client_dummy_requests_in_flight %d\n", rq.InFlight)
	fmt.Fprintf(&b, "# HELP mooncake_client_dummy_request_waits_total dummy calls that waited because their dummy (--max_requests_per_dummy) or the daemon (--max_requests_in_flight) had as many in flight as allowed\n# TYPE mooncake_client_dummy_request_waits_total counter\nmooncake_client_dummy_request_waits_total %d\n", rq.Waits)
	fmt.Fprintf(&b, "# HELP mooncake_client_dummy_reply_timeouts_total dummy connections closed because a reply was not read within --dummy_reply_timeout_seconds\n# TYPE mooncake_client_dummy_reply_timeouts_total counter\nmooncake_client_dummy_reply_timeouts_total %d\n", rq.ReplyTimeouts)
	fmt.Fprintf(&b, "# HELP mooncake_client_health health_check of the real client (0 healthy)\n# TYPE mooncake_client_health gauge\nmooncake_client_health %d\n", s.cfg.Client.Health())
	scopes := s.scopeList()
	sort.Slice(scopes, func(i, j int) bool { return scopes[i].name < scopes[j].name })
	rows := make([]labelled, len(scopes))
	for i, sc := range scopes {
		rows[i] = labelled{fmt.Sprintf("scope=%q", sc.name), sc.counters()}
	}
	if len(rows) > 0 {
		writeScopeMetrics(&b, rows)
	}
	b.WriteString(s.cfg.Client.Engine().MetricsText())
	procmetrics.Read().Write(&b)
	return b.String()
}
