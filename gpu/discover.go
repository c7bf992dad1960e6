package gpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrNoDriver means NVML (libnvidia-ml.so, shipped with the NVIDIA driver)
// could not be loaded: there is no usable GPU on this machine.
var ErrNoDriver = errors.New("gpu: NVIDIA driver (libnvidia-ml.so) not found")

// Device describes one GPU.
type Device struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	UUID        string `json:"uuid"`
	PCIBusID    string `json:"pci_bus_id"`
	MemoryTotal uint64 `json:"memory_total"`
	MemoryFree  uint64 `json:"memory_free"`
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
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			dev.MemoryTotal, dev.MemoryFree = mem.Total, mem.Free
		}
		inv.Devices = append(inv.Devices, dev)
	}
	return inv, nil
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
