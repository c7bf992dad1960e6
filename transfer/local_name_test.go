package transfer

import (
	"errors"
	"strings"
	"testing"
)

// An engine that would publish a loopback or wildcard name while its
// metadata server is on another host is refused before it publishes,
// naming the setting to change (192.0.2.1 is TEST-NET: never dialled).
func TestNewRefusesLocalNameWithRemoteMetadata(t *testing.T) {
	for _, c := range []struct{ host, meta string }{
		{"127.0.0.1", "http://192.0.2.1:8080/metadata"},
		{"0.0.0.0", "etcd://192.0.2.1:2379"},
		{"localhost:15000", "192.0.2.1:2379"},
	} {
		e, err := New(Config{LocalHostname: c.host, MetadataServer: c.meta})
		if err == nil {
			e.Close()
			t.Errorf("New(%q, %q) succeeded, want a refusal", c.host, c.meta)
			continue
		}
		var te *Error
		if !errors.As(err, &te) || te.Code != CodeInvalidArgument || !strings.Contains(err.Error(), "local_hostname") {
			t.Errorf("New(%q, %q): %v; want INVALID_ARGUMENT naming local_hostname", c.host, c.meta, err)
		}
	}
}
