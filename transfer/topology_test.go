package transfer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
)

func TestTopologyJSON(t *testing.T) {
	got := topologyJSON([]string{"0", "1"}, 2)
	want := `{"cpu:0":[[],[]],"cpu:1":[[],[]],"cuda:0":[[],[]],"cuda:1":[[],[]]}`
	if got != want {
		t.Fatalf("topology = %s, want %s", got, want)
	}
}

// TestLocalTopologyMatchesTheDriver: one "cuda:N" entry per GPU the CUDA
// driver sees (none without a driver), and at least one NUMA node.
func TestLocalTopologyMatchesTheDriver(t *testing.T) {
	var topo map[string]json.RawMessage
	if err := json.Unmarshal([]byte(LocalTopology()), &topo); err != nil {
		t.Fatal(err)
	}
	cpus, gpus := 0, 0
	for k := range topo {
		switch {
		case strings.HasPrefix(k, "cpu:"):
			cpus++
		case strings.HasPrefix(k, "cuda:"):
			gpus++
		default:
			t.Fatalf("unexpected topology key %q", k)
		}
	}
	if want := gpu.System().Devices(); cpus == 0 || gpus != want {
		t.Fatalf("topology %v: %d NUMA nodes, %d GPUs; the driver sees %d", topo, cpus, gpus, want)
	}
}
