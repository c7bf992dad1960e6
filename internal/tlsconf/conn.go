package tlsconf

import (
	"crypto/tls"
	"net"
	"strings"
)

// Listen returns ln serving TLS with cfg, or ln itself when cfg is nil.
// The handshake runs on a connection's first read or write, so it falls
// under the deadlines its server sets for those.
func Listen(ln net.Listener, cfg *tls.Config) net.Listener {
	if cfg == nil {
		return ln
	}
	return tls.NewListener(ln, cfg)
}

// ForAddr returns a copy of cfg whose ServerName is addr's host (when cfg
// names none), the name a client verifies the server's certificate
// against; nil for a nil cfg.
func ForAddr(cfg *tls.Config, addr string) *tls.Config {
	if cfg == nil {
		return nil
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		} else {
			cfg.ServerName = addr
		}
	}
	return cfg
}

// Client wraps an established connection to addr in TLS with cfg, or
// returns c itself when cfg is nil. The handshake runs on the first read
// or write.
func Client(c net.Conn, cfg *tls.Config, addr string) net.Conn {
	if cfg == nil {
		return c
	}
	return tls.Client(c, ForAddr(cfg, addr))
}

// State returns the TLS state of c, or of the connection it wraps (a
// wrapper exposes it as NetConn, as *tls.Conn does), and whether c carries
// TLS at all.
func State(c net.Conn) (tls.ConnectionState, bool) {
	for c != nil {
		if tc, ok := c.(*tls.Conn); ok {
			return tc.ConnectionState(), true
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return tls.ConnectionState{}, false
		}
		c = w.NetConn()
	}
	return tls.ConnectionState{}, false
}

// ForEtcd returns cfg for an etcd client of endpoints when one of them is
// an https:// URL, nil otherwise: etcd's clients take TLS from the
// endpoints' scheme, and the process's own files then verify etcd and
// present its certificate.
func ForEtcd(cfg *tls.Config, endpoints []string) *tls.Config {
	for _, e := range endpoints {
		if strings.HasPrefix(strings.TrimSpace(e), "https://") {
			if cfg == nil {
				return &tls.Config{MinVersion: tls.VersionTLS12}
			}
			return cfg.Clone()
		}
	}
	return nil
}
