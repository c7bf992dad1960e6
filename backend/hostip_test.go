package backend

import (
	"errors"
	"strings"
	"testing"
)

func TestPublishedHost(t *testing.T) {
	t.Setenv("MASTER_ADDR", "")
	t.Setenv("MC_PG_HOST_IP", "")
	if h, err := publishedHost(""); err != nil || h != "127.0.0.1" {
		t.Fatalf("no MASTER_ADDR: %q, %v; want 127.0.0.1", h, err)
	}
	t.Setenv("MASTER_ADDR", "localhost")
	if h, err := publishedHost(""); err != nil || h != "127.0.0.1" {
		t.Fatalf("MASTER_ADDR=localhost: %q, %v; want 127.0.0.1", h, err)
	}
	t.Setenv("MC_PG_HOST_IP", "10.1.2.3")
	if h, err := publishedHost(""); err != nil || h != "10.1.2.3" {
		t.Fatalf("MC_PG_HOST_IP: %q, %v; want 10.1.2.3", h, err)
	}
	if h, err := publishedHost("10.9.9.9"); err != nil || h != "10.9.9.9" {
		t.Fatalf("set_host_ip over MC_PG_HOST_IP: %q, %v; want 10.9.9.9", h, err)
	}
}

// A loopback or wildcard address, set or from MC_PG_HOST_IP, while
// MASTER_ADDR is another host's is refused, naming the setting.
func TestPublishedHostRefusesLoopbackWithRemoteMaster(t *testing.T) {
	t.Setenv("MASTER_ADDR", "192.0.2.1")
	for _, c := range []struct{ set, env string }{{"127.0.0.1", ""}, {"0.0.0.0", ""}, {"", "127.0.0.1"}} {
		t.Setenv("MC_PG_HOST_IP", c.env)
		h, err := publishedHost(c.set)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "MC_PG_HOST_IP") {
			t.Errorf("set %q, MC_PG_HOST_IP %q: got %q, %v; want ErrInvalid naming MC_PG_HOST_IP", c.set, c.env, h, err)
		}
	}
}
