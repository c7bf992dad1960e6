package client

import (
	"fmt"
	"net"
	"strings"

	"github.com/mooncake-go/mooncake/internal/netaddr"
	"github.com/mooncake-go/mooncake/kvstore"
)

// HostnameSetting names, for errors, where a user sets a store client's
// local name.
const HostnameSetting = "local_hostname (MOONCAKE_LOCAL_HOSTNAME with mooncake_config, --host for mooncake_client)"

// MasterHost returns the host (without port) of a master address:
// "host:port", or "etcd://h1:p1;h2:p2" for an HA master, where it is the
// first etcd endpoint's host, or "redis://host:port", where it is the
// Redis server's host; "" when addr is empty.
func MasterHost(addr string) string {
	addr = strings.TrimSpace(addr)
	if rest, ok := strings.CutPrefix(addr, "redis://"); ok {
		addr = strings.TrimSuffix(rest, "/")
	}
	if rest, ok := strings.CutPrefix(addr, "etcd://"); ok {
		eps := strings.FieldsFunc(rest, func(r rune) bool { return r == ';' || r == ',' })
		if len(eps) == 0 {
			return ""
		}
		addr = strings.TrimPrefix(strings.TrimPrefix(eps[0], "http://"), "https://")
	}
	return hostOnly(addr)
}

// hostOnly returns the host of "host:port", or hostPort itself when it
// has no port.
func hostOnly(hostPort string) string {
	if h, _, err := net.SplitHostPort(hostPort); err == nil {
		return h
	}
	return hostPort
}

// checkLocalName refuses a local name that only this host reaches (a
// loopback or wildcard address) when the master is on another host: the
// client would mount a segment under that name, and every other client
// would be told to transfer to itself.
func checkLocalName(cfg Config) error {
	if err := netaddr.Unreachable(hostOnly(cfg.LocalHostname), MasterHost(cfg.MasterServerAddr), HostnameSetting); err != nil {
		return fmt.Errorf("%w: master %s: %v", kvstore.InvalidParams, cfg.MasterServerAddr, err)
	}
	return nil
}
