package rpcmsg

import (
	"fmt"
	"strings"
)

// MetricsText is the server's connection counts (Stats) in the Prometheus
// text format.
func (s *Server) MetricsText() string {
	st := s.Stats()
	var sb strings.Builder
	for _, m := range []struct {
		name, kind, help string
		value            uint64
	}{
		{"mooncake_te_rpc_connections", "gauge", "connections the RPC interface holds now", uint64(st.Conns)},
		{"mooncake_te_rpc_refused_connections_total", "counter", "connections closed at accept: the connection cap or the per-host cap was reached", st.Refused},
		{"mooncake_te_rpc_idle_closed_total", "counter", "connections closed because nothing arrived on them within the idle timeout", st.IdleClosed},
	} {
		fmt.Fprintf(&sb, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", m.name, m.help, m.name, m.kind, m.name, m.value)
	}
	return sb.String()
}
