package main

import (
	"net"
	"strings"
	"testing"
)

// Without --host the daemon publishes the local address of the route to
// the master: loopback for a loopback master, this host's own address for
// a master at that address.
func TestLocalNameDefaultIsRoutable(t *testing.T) {
	if got, err := localName("", "127.0.0.1:50051"); err != nil || got != "127.0.0.1" {
		t.Fatalf("localName with a loopback master = %q, %v; want 127.0.0.1", got, err)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		got, err := localName("", net.JoinHostPort(n.IP.String(), "50051"))
		if err != nil || got != n.IP.String() {
			t.Fatalf("localName with master %v = %q, %v; want %v", n.IP, got, err, n.IP)
		}
		return
	}
	t.Skip("no non-loopback IPv4 address on this host")
}

// --host given as a loopback or wildcard address with a master on another
// host is refused, naming --host; loopback with a loopback master is kept.
func TestLocalNameRefusesUnreachableHost(t *testing.T) {
	for _, host := range []string{"0.0.0.0", "127.0.0.1", "127.0.0.1:12400"} {
		if _, err := localName(host, "192.0.2.1:50051"); err == nil || !strings.Contains(err.Error(), "--host") {
			t.Errorf("localName(%q) with a remote master: %v; want a refusal naming --host", host, err)
		}
	}
	for _, c := range []struct{ host, master string }{{"127.0.0.1", "127.0.0.1:50051"}, {"10.0.0.2:12400", "10.0.0.1:50051"}} {
		if got, err := localName(c.host, c.master); err != nil || got != c.host {
			t.Errorf("localName(%q, %q) = %q, %v; want it kept", c.host, c.master, got, err)
		}
	}
}
