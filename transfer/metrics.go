package transfer

import (
	"fmt"
	"strings"
)

// MetricsText is the engine's counters in the Prometheus text format:
// mooncake_te_tcp_refused_peers_total counts the data connections closed
// because their peer did not prove it holds the cluster secret.
func (e *Engine) MetricsText() string {
	var sb strings.Builder
	const name = "mooncake_te_tcp_refused_peers_total"
	fmt.Fprintf(&sb, "# HELP %s TCP transport connections refused: the peer did not prove it holds the cluster secret\n# TYPE %s counter\n%s %d\n",
		name, name, name, e.tcpSrv.Refused())
	return sb.String()
}
