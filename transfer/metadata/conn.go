package metadata

import (
	"net"
	"net/url"
	"strings"

	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/transfer/errcode"
)

// P2PHandshake is the metadata "server" string that selects peer-to-peer
// handshake mode.
const P2PHandshake = "P2PHANDSHAKE"

// Conn is a parsed metadata connection string.
type Conn struct {
	Kind string // "etcd", "http" (also https), "redis", or "p2p"
	// Target is what the backend dials: for etcd the endpoints joined by
	// commas; for http the full URL; for redis host:port.
	Target string
}

// ParseConn parses a metadata connection string as upstream does:
// "P2PHANDSHAKE", "etcd://h:p[,h2:p2]", "http(s)://h:p/path",
// "redis://h:p", or a bare "host:port" meaning etcd.
func ParseConn(s string) (Conn, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return Conn{}, errcode.Errorf(errcode.InvalidArgument, nil, "empty metadata server")
	case strings.EqualFold(s, P2PHandshake):
		return Conn{Kind: "p2p"}, nil
	}
	proto, rest, ok := strings.Cut(s, "://")
	if !ok {
		return Conn{Kind: "etcd", Target: s}, nil
	}
	switch strings.ToLower(proto) {
	case "etcd":
		if rest == "" {
			return Conn{}, errcode.Errorf(errcode.InvalidArgument, nil, "etcd metadata server %q has no endpoints", s)
		}
		return Conn{Kind: "etcd", Target: rest}, nil
	case "http", "https":
		return Conn{Kind: "http", Target: s}, nil
	case "redis":
		addr, err := redis.ParseAddr(s)
		if err != nil {
			return Conn{}, errcode.Errorf(errcode.InvalidArgument, err, "redis metadata server")
		}
		return Conn{Kind: "redis", Target: addr}, nil
	default:
		return Conn{}, errcode.Errorf(errcode.NotImplemented, nil, "metadata protocol %q is not supported (etcd, http, redis, P2PHANDSHAKE)", proto)
	}
}

// Host returns the host (without port) of the metadata server that c
// names: the first endpoint's for etcd, the URL's for http, the server's
// for redis; "" for p2p, which has no server.
func (c Conn) Host() string {
	switch c.Kind {
	case "redis":
		if h, _, err := net.SplitHostPort(c.Target); err == nil {
			return h
		}
	case "http":
		if u, err := url.Parse(c.Target); err == nil {
			return u.Hostname()
		}
	case "etcd":
		first, _, _ := strings.Cut(c.Target, ",")
		first = strings.TrimSpace(first)
		if u, err := url.Parse(first); err == nil && u.Host != "" {
			return u.Hostname()
		}
		if h, _, err := net.SplitHostPort(first); err == nil {
			return h
		}
		return first
	}
	return ""
}
