// Package netaddr answers the question every multi-host process asks at
// setup: which of this host's addresses does another host reach it at? The
// answer is the source address the kernel picks for the route to a host the
// process already knows is reachable (the rendezvous master, the metadata
// server, the store master), found without sending a packet. The backend,
// EP and the store share it, so every part publishes the same address.
package netaddr

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// lookupTimeout bounds the name resolution of a target given by name.
const lookupTimeout = 5 * time.Second

// RouteSource returns the local address of the route to target (a host
// name or an IP address, without a port): the address a peer on target's
// side of the network reaches this host at. A loopback target gives a
// loopback address. Nothing is sent: the route is looked up by connecting
// a UDP socket, which only binds it.
func RouteSource(target string) (net.IP, error) {
	ips, err := resolve(target)
	if err != nil {
		return nil, err
	}
	var last error
	for _, ip := range ips {
		conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: ip, Port: 9})
		if err != nil {
			last = err
			continue
		}
		src := conn.LocalAddr().(*net.UDPAddr).IP
		conn.Close()
		return src, nil
	}
	return nil, fmt.Errorf("no route to %s: %w", target, last)
}

// Local reports whether host names only this host: a loopback or
// wildcard (unspecified) address, "localhost", an empty host, or a name
// that resolves to loopback addresses only. Another host cannot reach a
// process that publishes such a name. A name that does not resolve is not
// local (the caller's own dial reports it).
func Local(host string) bool {
	if host == "" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback() || ip.IsUnspecified()
	}
	if host == "localhost" {
		return true
	}
	ips, err := resolve(host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() && !ip.IsUnspecified() {
			return false
		}
	}
	return true
}

// resolve returns target's addresses (target itself when it is one),
// IPv4 first.
func resolve(target string) ([]net.IP, error) {
	if ip := net.ParseIP(target); ip != nil {
		return []net.IP{ip}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", target, err)
	}
	var v4, v6 []net.IP
	for _, a := range addrs {
		if a.IP.To4() != nil {
			v4 = append(v4, a.IP)
		} else {
			v6 = append(v6, a.IP)
		}
	}
	if len(v4)+len(v6) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", target)
	}
	return append(v4, v6...), nil
}

// Unreachable returns an error when own, the address a process
// publishes, reaches only this host while peer, the host it meets its peers
// through, is not a loopback name: peers may then be on other hosts, and
// would be told to dial themselves. setting names what the user changes to
// fix it. It returns nil otherwise (a run whose peer is loopback is a
// one-host run and may publish loopback).
func Unreachable(own, peer, setting string) error {
	if peer == "" || Local(peer) || !Local(own) {
		return nil
	}
	return fmt.Errorf("this process would publish the address %q, which only this host reaches, while its peers meet at %s, which is not a loopback address; set %s to an address of this host that the other hosts reach", own, peer, setting)
}

// Choose returns the address a process publishes to its peers: explicit
// when given (checked with Unreachable against peer); otherwise the
// source address of the route to peer; otherwise, with no peer known,
// 127.0.0.1 (a one-host run). setting names how the user sets explicit,
// for the errors.
func Choose(explicit, peer, setting string) (string, error) {
	if explicit != "" {
		if err := Unreachable(explicit, peer, setting); err != nil {
			return "", err
		}
		return explicit, nil
	}
	if peer == "" {
		return "127.0.0.1", nil
	}
	ip, err := RouteSource(peer)
	if err != nil {
		return "", fmt.Errorf("find this host's address towards %s: %w; set %s to an address of this host that the other hosts reach", peer, err, setting)
	}
	return ip.String(), nil
}

// TorchMaster returns MASTER_ADDR, the rendezvous host that torchrun (and
// torch's env:// initialisation) gives every rank; "" when unset.
func TorchMaster() string {
	return strings.TrimSpace(os.Getenv("MASTER_ADDR"))
}
