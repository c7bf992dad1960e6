package ep

import (
	"strings"
	"testing"
)

// A Buffer's engine publishes the local address of the route to
// MASTER_ADDR by default; a loopback name while MASTER_ADDR is another
// host's is refused, naming MOONCAKE_EP_LOCAL_HOSTNAME.
func TestBufferEngineAddress(t *testing.T) {
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	b, err := NewBuffer(Config{Rank: 0, Ranks: 1, Bytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	name := b.eng.Name()
	b.Close()
	if !strings.HasPrefix(name, "127.0.0.1:") {
		t.Fatalf("engine named %q with MASTER_ADDR=127.0.0.1; want 127.0.0.1:port", name)
	}
	t.Setenv("MASTER_ADDR", "192.0.2.1")
	for _, host := range []string{"127.0.0.1", "0.0.0.0"} {
		b, err := NewBuffer(Config{Rank: 0, Ranks: 1, Bytes: 4096, LocalHostname: host})
		if err == nil {
			b.Close()
			t.Fatalf("LocalHostname %q with MASTER_ADDR=192.0.2.1 accepted", host)
		}
		if !strings.Contains(err.Error(), "MOONCAKE_EP_LOCAL_HOSTNAME") {
			t.Fatalf("LocalHostname %q: %v; want an error naming MOONCAKE_EP_LOCAL_HOSTNAME", host, err)
		}
	}
}
