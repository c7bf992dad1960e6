package transfer

import (
	"encoding/json"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/gpu"
)

// LocalTopology describes this host for placement, in upstream's format:
// one entry per NUMA node, "cpu:N", and one per GPU the CUDA driver sees,
// "cuda:N", each [preferred NICs, available NICs]. This engine drives no
// RDMA NICs, so both lists are empty; `mooncake info` describes the GPUs
// themselves (PCI bus id, NUMA node, memory, NVLink peers).
func LocalTopology() string {
	return topologyJSON(numaNodes(), gpu.System().Devices())
}

// numaNodes lists the host's NUMA node ids ("0" when sysfs says nothing).
func numaNodes() []string {
	nodes, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	var ids []string
	for _, n := range nodes {
		ids = append(ids, strings.TrimPrefix(filepath.Base(n), "node"))
	}
	if len(ids) == 0 {
		ids = []string{"0"}
	}
	sort.Strings(ids)
	return ids
}

func topologyJSON(numa []string, gpus int) string {
	topo := map[string][2][]string{}
	for _, id := range numa {
		topo["cpu:"+id] = [2][]string{{}, {}}
	}
	for i := range gpus {
		topo["cuda:"+strconv.Itoa(i)] = [2][]string{{}, {}}
	}
	b, _ := json.Marshal(topo)
	return string(b)
}
