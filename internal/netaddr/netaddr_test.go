package netaddr

import (
	"net"
	"strings"
	"testing"
)

func TestRouteSourceLoopback(t *testing.T) {
	for _, target := range []string{"127.0.0.1", "localhost"} {
		ip, err := RouteSource(target)
		if err != nil {
			t.Fatalf("RouteSource(%q): %v", target, err)
		}
		if !ip.IsLoopback() {
			t.Fatalf("RouteSource(%q) = %v, want a loopback address", target, ip)
		}
	}
}

// The route to one of this host's own non-loopback addresses starts at an
// address of this host (the kernel picks the target itself).
func TestRouteSourceOwnAddress(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		ip, err := RouteSource(n.IP.String())
		if err != nil {
			t.Fatalf("RouteSource(%v): %v", n.IP, err)
		}
		if !ip.Equal(n.IP) {
			t.Fatalf("RouteSource(%v) = %v, want the address itself", n.IP, ip)
		}
		return
	}
	t.Skip("no non-loopback IPv4 address on this host")
}

func TestRouteSourceUnresolvable(t *testing.T) {
	if _, err := RouteSource("no-such-host.invalid"); err == nil {
		t.Fatal("RouteSource of an unresolvable name succeeded")
	}
}

func TestLocal(t *testing.T) {
	for host, want := range map[string]bool{
		"":                     true,
		"127.0.0.1":            true,
		"127.0.1.1":            true,
		"::1":                  true,
		"0.0.0.0":              true,
		"::":                   true,
		"localhost":            true,
		"10.231.0.1":           false,
		"192.0.2.7":            false,
		"fd00::1":              false,
		"no-such-host.invalid": false,
	} {
		if got := Local(host); got != want {
			t.Errorf("Local(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestUnreachable(t *testing.T) {
	for _, c := range []struct {
		own, peer string
		refused   bool
	}{
		{"127.0.0.1", "10.0.0.1", true},
		{"0.0.0.0", "10.0.0.1", true},
		{"localhost", "10.0.0.1", true},
		{"10.0.0.2", "10.0.0.1", false},
		{"127.0.0.1", "127.0.0.1", false},
		{"127.0.0.1", "localhost", false},
		{"127.0.0.1", "", false},
	} {
		err := Unreachable(c.own, c.peer, "MY_SETTING")
		if (err != nil) != c.refused {
			t.Errorf("Unreachable(%q, %q) = %v, want refused %v", c.own, c.peer, err, c.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "MY_SETTING") {
			t.Errorf("Unreachable(%q, %q) = %v: does not name the setting", c.own, c.peer, err)
		}
	}
}

func TestChoose(t *testing.T) {
	for _, c := range []struct {
		explicit, peer, want string
		refused              bool
	}{
		{"10.0.0.2", "10.0.0.1", "10.0.0.2", false},
		{"127.0.0.1", "10.0.0.1", "", true},
		{"", "", "127.0.0.1", false},
		{"", "127.0.0.1", "127.0.0.1", false},
		{"127.0.0.1", "127.0.0.1", "127.0.0.1", false},
		{"", "no-such-host.invalid", "", true},
	} {
		got, err := Choose(c.explicit, c.peer, "MY_SETTING")
		if (err != nil) != c.refused || got != c.want {
			t.Errorf("Choose(%q, %q) = %q, %v; want %q, refused %v", c.explicit, c.peer, got, err, c.want, c.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "MY_SETTING") {
			t.Errorf("Choose(%q, %q) = %v: does not name the setting", c.explicit, c.peer, err)
		}
	}
}
