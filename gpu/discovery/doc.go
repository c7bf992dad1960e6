// Package discovery lists the machine's NVIDIA GPUs through NVML
// (github.com/NVIDIA/go-nvml): name, UUID, PCI bus id, NUMA node, memory and
// NVLink peers, for `mooncake info`.
//
// NVML is loaded at run time, so this package builds and runs on machines
// without a GPU or driver: Discover then reports ErrNoDriver. It is kept
// apart from package gpu because go-nvml leaves NVML's symbols unresolved
// until it loads the library: fine in an executable, but a shared library
// linking it (libmooncake.so) would fail to load without the driver.
package discovery
