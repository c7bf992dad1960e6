package discovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoDriver means NVML (libnvidia-ml.so, shipped with the NVIDIA driver)
// could not be loaded: there is no usable GPU on this machine.
var ErrNoDriver = errors.New("gpu: NVIDIA driver (libnvidia-ml.so) not found")

// Device describes one GPU.
type Device struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	UUID     string `json:"uuid"`
	PCIBusID string `json:"pci_bus_id"`
	// NUMANode is the host NUMA node the GPU is attached to (-1: unknown).
	NUMANode    int    `json:"numa_node"`
	MemoryTotal uint64 `json:"memory_total"`
	MemoryFree  uint64 `json:"memory_free"`
	// NVLinkPeers lists the PCI bus ids at the far end of the GPU's
	// active NVLinks (GPUs or NVSwitches), one entry per link.
	NVLinkPeers []string `json:"nvlink_peers"`
}

// Inventory is what Discover found.
type Inventory struct {
	DriverVersion string   `json:"driver_version"`
	Devices       []Device `json:"devices"`
}

// Discover lists the GPUs NVML reports. It returns ErrNoDriver when NVML is
// absent, and another error if NVML fails on a present driver.
func Discover() (Inventory, error) {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND || ret == nvml.ERROR_DRIVER_NOT_LOADED {
			return Inventory{}, ErrNoDriver
		}
		return Inventory{}, fmt.Errorf("gpu: nvml init: %s", nvml.ErrorString(ret))
	}
	defer nvml.Shutdown()
	var inv Inventory
	if v, ret := nvml.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return inv, fmt.Errorf("gpu: device count: %s", nvml.ErrorString(ret))
	}
	for i := range n {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return inv, fmt.Errorf("gpu: device %d: %s", i, nvml.ErrorString(ret))
		}
		dev := Device{Index: i}
		dev.Name, _ = d.GetName()
		dev.UUID, _ = d.GetUUID()
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			dev.PCIBusID = cString(pci.BusId[:])
		}
		dev.NUMANode = numaNode(d, sysfsPCI, dev.PCIBusID)
		dev.NVLinkPeers = nvlinkPeers(d)
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			dev.MemoryTotal, dev.MemoryFree = mem.Total, mem.Free
		}
		inv.Devices = append(inv.Devices, dev)
	}
	return inv, nil
}

// sysfsPCI is where Linux lists PCI devices.
const sysfsPCI = "/sys/bus/pci/devices"

// numaNode asks NVML for the GPU's NUMA node, and the kernel (sysfs) when
// the driver is too old to say.
func numaNode(d nvml.Device, sysfs, busID string) int {
	if n, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS {
		return n
	}
	return sysfsNUMANode(sysfs, busID)
}

// sysfsNUMANode reads the NUMA node of the PCI device busID (NVML's form,
// "00000000:17:00.0") under sysfs; -1 when unknown.
func sysfsNUMANode(sysfs, busID string) int {
	id := strings.ToLower(busID)
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) > 4 {
		id = dom[len(dom)-4:] + ":" + rest // sysfs uses a 4-digit domain
	}
	b, err := os.ReadFile(filepath.Join(sysfs, id, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// nvlinkPeers lists the remote PCI bus id of each active NVLink.
func nvlinkPeers(d nvml.Device) []string {
	peers := []string{}
	for link := range nvml.NVLINK_MAX_LINKS {
		st, ret := d.GetNvLinkState(link)
		if ret == nvml.ERROR_INVALID_ARGUMENT || ret == nvml.ERROR_NOT_SUPPORTED {
			break // past the device's last link, or no NVLink at all
		}
		if ret != nvml.SUCCESS || st != nvml.FEATURE_ENABLED {
			continue
		}
		if pci, ret := d.GetNvLinkRemotePciInfo(link); ret == nvml.SUCCESS {
			peers = append(peers, cString(pci.BusId[:]))
		}
	}
	return peers
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}
