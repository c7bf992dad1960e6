package client

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/transfer"
)

// refusedPeers is mooncake_te_tcp_refused_peers_total in text, -1 when
// it is not there.
func refusedPeers(text string) int {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, "mooncake_te_tcp_refused_peers_total "); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return -1
}

// TestMetricsTextCountsTheEnginesRefusedPeers: the store client's metrics
// text carries its Transfer Engine's count of TCP peers refused for not
// holding the cluster secret.
func TestMetricsTextCountsTheEnginesRefusedPeers(t *testing.T) {
	t.Setenv("MC_TE_SECRET_FILE", "")
	t.Setenv("MC_TE_SECRET", "")
	rpc, meta := startMaster(t, nil)
	engine := func(secret []byte) *transfer.Engine {
		e, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.1", MetadataServer: transfer.P2PHandshake,
			ForceTCP: true, TransferTimeout: 3 * time.Second, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	target := engine([]byte("cluster-secret-0123456789abcdef"))
	c, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: meta, GlobalSegmentSize: 4 << 20,
		LocalBufferSize: 4 << 20, MasterServerAddr: rpc, Engine: target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if n := refusedPeers(c.MetricsText()); n != 0 {
		t.Fatalf("refused peers %d before any peer came:\n%s", n, c.MetricsText())
	}

	mem := buf(t, 4096)
	if err := target.RegisterLocalMemory(gpu.AddrOf(mem), 4096, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	bad := engine(nil)
	src, err := bad.AllocateManagedBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	err = bad.TransferSync(target.Name(), []transfer.Request{{Opcode: transfer.OpWrite, Source: src,
		TargetOffset: uint64(gpu.AddrOf(mem)), Length: 4096}})
	if err == nil {
		t.Fatal("a peer without the secret wrote")
	}
	// The target counts the refusal on its own listener's goroutine, which
	// may run after the writer already saw its connection close.
	testutil.WaitUntil(t, 10*time.Second, "the refused peer counted", func() bool {
		return refusedPeers(c.MetricsText()) >= 1
	})
}
