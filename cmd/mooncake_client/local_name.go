package main

import (
	"net"

	"github.com/mooncake-go/mooncake/internal/netaddr"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// localName returns the name the daemon's store client publishes (its
// segment's name and its Transfer Engine's): host as given by --host,
// refused when it is a loopback or wildcard address while the master is on
// another host; without --host, the local address of the route to the
// master, which the master's other clients reach.
func localName(host, master string) (string, error) {
	peer := client.MasterHost(master)
	if host == "" {
		return netaddr.Choose("", peer, "--host")
	}
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	if err := netaddr.Unreachable(h, peer, "--host"); err != nil {
		return "", err
	}
	return host, nil
}
