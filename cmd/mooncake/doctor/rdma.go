package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
)

// rdmaFacts is what the RDMA check found, for the memory checks.
type rdmaFacts struct {
	results []Result
	devices int
}

// zeroGID is an unset GID table entry.
const zeroGID = "0000:0000:0000:0000:0000:0000:0000:0000"

// checkRDMA lists the RDMA devices in sysfs with the state, link layer and
// first GID of every port. Mooncake-Go moves bytes over TCP and shared
// memory; the devices matter to upstream processes on this host and to the
// memlock check.
func checkRDMA(cfg Config) rdmaFacts {
	devs, err := os.ReadDir(cfg.InfinibandPath)
	if err != nil || len(devs) == 0 {
		return rdmaFacts{results: []Result{ok("rdma", fmt.Sprintf("no RDMA devices in %s; transfers use TCP and shared memory", cfg.InfinibandPath))}}
	}
	f := rdmaFacts{devices: len(devs)}
	var active []string
	for _, d := range devs {
		portsDir := filepath.Join(cfg.InfinibandPath, d.Name(), "ports")
		ports, _ := os.ReadDir(portsDir)
		sort.Slice(ports, func(i, j int) bool { return ports[i].Name() < ports[j].Name() })
		if len(ports) == 0 {
			f.results = append(f.results, problem("rdma", Warning, troubleshoot.RDMAPortDown, fmt.Sprintf("RDMA device %s has no ports in sysfs", d.Name())))
		}
		for _, p := range ports {
			dir := filepath.Join(portsDir, p.Name())
			state := readTrim(filepath.Join(dir, "state"))      // "4: ACTIVE"
			layer := readTrim(filepath.Join(dir, "link_layer")) // "InfiniBand" or "Ethernet"
			gid := readTrim(filepath.Join(dir, "gids", "0"))    // first GID
			name := fmt.Sprintf("%s port %s (%s)", d.Name(), p.Name(), layer)
			switch {
			case !strings.HasSuffix(state, "ACTIVE"):
				f.results = append(f.results, problem("rdma", Warning, troubleshoot.RDMAPortDown,
					fmt.Sprintf("Device %s port %s not active (state: %s)", d.Name(), p.Name(), state)))
			case gid == "" || gid == zeroGID:
				f.results = append(f.results, problem("rdma", Warning, troubleshoot.RDMAHandshake,
					fmt.Sprintf("%s: GID index 0 is all zeros; upstream needs MC_GID_INDEX set to a valid entry", name)))
			default:
				active = append(active, name)
			}
		}
	}
	if len(active) > 0 {
		f.results = append([]Result{ok("rdma", "active: "+strings.Join(active, ", ")+" (Mooncake-Go itself uses TCP and shared memory)")}, f.results...)
	}
	return f
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
