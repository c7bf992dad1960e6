package client

import (
	"errors"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/internal/nodeid"
	"github.com/mooncake-go/mooncake/kvstore"
)

func TestMasterHost(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:50051":                    "127.0.0.1",
		"10.0.0.1:50051":                     "10.0.0.1",
		"master.example":                     "master.example",
		"etcd://10.0.0.2:2379;10.0.0.3:2379": "10.0.0.2",
		"etcd://http://10.0.0.4:2379":        "10.0.0.4",
		"[fd00::1]:50051":                    "fd00::1",
		"redis://10.0.0.5:6379/":             "10.0.0.5",
		"redis://[fd00::2]:6379":             "fd00::2",
		"":                                   "",
	} {
		if got := MasterHost(addr); got != want {
			t.Errorf("MasterHost(%q) = %q, want %q", addr, got, want)
		}
	}
}

// A store client given a loopback or wildcard local name while its master
// is on another host is refused at setup, naming the setting (192.0.2.1
// is TEST-NET: the refusal comes before any dial).
func TestSetupRefusesLocalNameWithRemoteMaster(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "0.0.0.0", "localhost:12345"} {
		c, err := New(Config{LocalHostname: host, MetadataServer: "P2PHANDSHAKE", MasterServerAddr: "192.0.2.1:50051"})
		if err == nil {
			c.Close()
			t.Errorf("New(%q) with a remote master succeeded", host)
			continue
		}
		if !errors.Is(err, kvstore.InvalidParams) || !strings.Contains(err.Error(), "MOONCAKE_LOCAL_HOSTNAME") ||
			!strings.Contains(err.Error(), "local_hostname") {
			t.Errorf("New(%q): %v; want INVALID_PARAMS naming local_hostname and MOONCAKE_LOCAL_HOSTNAME", host, err)
		}
	}
}

// The node id a client reports to the master, with its segments and with
// prefer_alloc_in_same_node writes, is internal/nodeid's (boot id and pid
// namespace), not the host name that containers may share.
func TestClientReportsNodeID(t *testing.T) {
	if nodeid.ID() == "" {
		t.Skip("no node id on this host")
	}
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 1<<20, 0)
	if got := c.segments[0].GetHostId(); got != nodeid.ID() {
		t.Fatalf("segment host id %q, want the node id %q", got, nodeid.ID())
	}
	if got := (ReplicateConfig{PreferAllocInSameNode: true}).proto(c.hostID).GetHostId(); got != nodeid.ID() {
		t.Fatalf("write host id %q, want the node id %q", got, nodeid.ID())
	}
}
