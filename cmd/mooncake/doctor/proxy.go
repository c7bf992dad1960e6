package doctor

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpproxy"

	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/transfer/metadata"
)

// proxyVars are the proxy variables that tools read, lower case first.
var proxyVars = []string{"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}

// checkProxy reports proxy variables that capture Mooncake's traffic. Go's
// clients (our binaries and libmooncake) never proxy loopback and follow
// no_proxy; they send the HTTP metadata server's requests through
// http_proxy and gRPC (master, etcd) through https_proxy. curl, Python's
// HTTP clients and upstream's binaries also proxy loopback.
func checkProxy(cfg Config, env environ) []Result {
	var set []string
	for _, k := range proxyVars {
		if strings.TrimSpace(env[k]) != "" {
			set = append(set, k+"="+env[k])
		}
	}
	if len(set) == 0 {
		return []Result{ok("proxy", "no proxy variables set")}
	}
	pc := httpproxy.Config{
		HTTPProxy:  first(env, "http_proxy", "HTTP_PROXY"),
		HTTPSProxy: first(env, "https_proxy", "HTTPS_PROXY"),
		NoProxy:    first(env, "no_proxy", "NO_PROXY"),
	}
	proxyFor := pc.ProxyFunc()
	var out []Result
	for _, t := range proxyTargets(cfg) {
		u := &url.URL{Scheme: t.scheme, Host: t.hostport}
		if p, err := proxyFor(u); err == nil && p != nil {
			out = append(out, finding("proxy", Failure,
				fmt.Sprintf("%s %s would be reached through the proxy %s", t.what, t.hostport, p.Redacted()),
				fmt.Sprintf("add %s to no_proxy (export no_proxy=%s,$no_proxy) or unset the proxy variables", hostOf(t.hostport), hostOf(t.hostport))))
		}
	}
	if !noProxyCoversLoopback(pc.NoProxy) {
		out = append(out, finding("proxy", Warning,
			fmt.Sprintf("%s is set and no_proxy does not exempt loopback: curl, Python HTTP clients and upstream Mooncake binaries send 127.0.0.1 traffic (metadata server, etcd) to the proxy (Mooncake-Go's own clients do not)", strings.Join(set, ", ")),
			"export no_proxy=127.0.0.1,localhost,<cluster hosts> or unset http_proxy https_proxy all_proxy"))
	}
	if len(out) == 0 {
		out = append(out, ok("proxy", fmt.Sprintf("%s is set; no_proxy exempts loopback and every Mooncake address checked", strings.Join(set, ", "))))
	}
	return out
}

type proxyTarget struct{ what, scheme, hostport string }

// proxyTargets are the addresses the deployment's Go clients dial, with
// the scheme whose proxy variable applies.
func proxyTargets(cfg Config) []proxyTarget {
	var ts []proxyTarget
	if rest, ok := strings.CutPrefix(cfg.Master, "etcd://"); ok {
		for _, ep := range replication.ParseEndpoints(rest) {
			ts = append(ts, proxyTarget{"HA etcd", "https", trimScheme(ep)})
		}
	} else if cfg.Master != "" {
		ts = append(ts, proxyTarget{"master", "https", cfg.Master})
	}
	if c, err := metadata.ParseConn(cfg.Metadata); err == nil {
		switch c.Kind {
		case "http":
			if u, err := url.Parse(c.Target); err == nil {
				ts = append(ts, proxyTarget{"HTTP metadata server", u.Scheme, u.Host})
			}
		case "etcd":
			for _, ep := range strings.Split(c.Target, ",") {
				ts = append(ts, proxyTarget{"etcd metadata server", "https", trimScheme(ep)})
			}
		}
	}
	return ts
}

func trimScheme(ep string) string {
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		return u.Host
	}
	return ep
}

func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

func first(env environ, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(env[n]); v != "" {
			return v
		}
	}
	return ""
}

// noProxyCoversLoopback reports whether no_proxy exempts 127.0.0.1 for
// tools that match it literally, by name, or by CIDR.
func noProxyCoversLoopback(noProxy string) bool {
	for _, e := range strings.Split(noProxy, ",") {
		e = strings.TrimSpace(e)
		if e == "*" || e == "127.0.0.1" || e == "127.0.0.0/8" {
			return true
		}
	}
	return false
}
