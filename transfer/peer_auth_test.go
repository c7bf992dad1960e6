package transfer

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
)

// secretEngine starts a TCP-only engine with the cluster secret secret
// (nil: none, as upstream).
func secretEngine(t *testing.T, secret []byte) *Engine {
	t.Helper()
	t.Setenv("MC_TE_SECRET_FILE", "")
	t.Setenv("MC_TE_SECRET", "")
	e, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, ForceTCP: true,
		TransferTimeout: 3 * time.Second, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestTCPPeersNeedTheClusterSecret: a target with a cluster secret serves
// an initiator with the same secret, and refuses one without a secret
// and one with another: their WRITEs leave its memory as it was, their
// READs bring nothing back, and each refusal is counted. An initiator
// with the secret refuses a target without it: its WRITE never reaches
// that target's memory.
func TestTCPPeersNeedTheClusterSecret(t *testing.T) {
	secret := []byte("cluster-secret-0123456789abcdef")
	target := secretEngine(t, secret)
	const n = 5<<20 + 77 // two slices over the lanes; one-slice requests take the direct path
	remote := anonMemory(t, n)
	if err := target.RegisterLocalMemory(gpu.AddrOf(remote), n, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	transfer := func(e *Engine, op Opcode, local []byte, length int) error {
		return e.TransferSync(target.Name(), []Request{{Opcode: op, Source: gpu.AddrOf(local),
			TargetOffset: uint64(gpu.AddrOf(remote)), Length: uint64(length)}})
	}

	good := secretEngine(t, secret)
	local := managed(t, good, n)
	for _, length := range []int{4096, n} {
		copy(local, pattern(length, byte(length)))
		if err := transfer(good, OpWrite, local, length); err != nil {
			t.Fatalf("write of %d bytes with the secret: %v", length, err)
		}
		if !bytes.Equal(remote[:length], local[:length]) {
			t.Fatalf("write of %d bytes with the secret: the target's memory differs", length)
		}
		clear(local)
		if err := transfer(good, OpRead, local, length); err != nil || !bytes.Equal(local[:length], remote[:length]) {
			t.Fatalf("read of %d bytes with the secret: %v", length, err)
		}
	}
	want := bytes.Clone(remote)
	if !strings.Contains(target.MetricsText(), "\nmooncake_te_tcp_refused_peers_total 0\n") {
		t.Fatalf("refusals counted before any peer lacked the secret:\n%s", target.MetricsText())
	}

	for name, s := range map[string][]byte{"no secret": nil, "another secret": []byte("another-secret-0123456789abcdef")} {
		before := target.tcpSrv.Refused()
		bad := secretEngine(t, s)
		mine := managed(t, bad, n)
		for _, length := range []int{4096, n} {
			copy(mine, pattern(length, 0xEE))
			if err := transfer(bad, OpWrite, mine, length); err == nil {
				t.Errorf("%s: a write of %d bytes was accepted", name, length)
			}
			clear(mine)
			if err := transfer(bad, OpRead, mine, length); err == nil {
				t.Errorf("%s: a read of %d bytes was accepted", name, length)
			}
			if !bytes.Equal(mine, make([]byte, n)) {
				t.Errorf("%s: a refused read brought bytes back", name)
			}
		}
		if !bytes.Equal(remote, want) {
			t.Fatalf("%s: the target's memory changed", name)
		}
		if target.tcpSrv.Refused() <= before {
			t.Errorf("%s: no refusal counted", name)
		}
		if want := fmt.Sprintf("\nmooncake_te_tcp_refused_peers_total %d\n", target.tcpSrv.Refused()); !strings.Contains(target.MetricsText(), want) {
			t.Errorf("%s: the metrics text lacks %q:\n%s", name, want, target.MetricsText())
		}
	}

	// A target without the secret: the initiator with it sends nothing.
	open := secretEngine(t, nil)
	openMem := anonMemory(t, 4096)
	if err := open.RegisterLocalMemory(gpu.AddrOf(openMem), 4096, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	copy(local, pattern(4096, 0x11))
	err := good.TransferSync(open.Name(), []Request{{Opcode: OpWrite, Source: gpu.AddrOf(local),
		TargetOffset: uint64(gpu.AddrOf(openMem)), Length: 4096}})
	if err == nil || !bytes.Equal(openMem, make([]byte, 4096)) {
		t.Fatalf("a write to a target without the secret: %v (its memory written: %v)", err, !bytes.Equal(openMem, make([]byte, 4096)))
	}
}
