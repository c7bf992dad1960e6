// Package gpu gives the module access to device memory through the CUDA
// driver (cuda_driver.go); discovery through NVML is package
// gpu/discovery.
//
// Nothing here needs CUDA at build time: libcuda.so.1 is loaded at run time,
// and on a machine without it every pointer is host memory. Device memory is never dereferenced by Go code:
// Memory classifies a pointer (Memory.Pointer), copies between any two
// kinds of memory (Memory.Copy) and streams device memory to and from a
// network connection through pinned host chunks in a two-stage pipeline
// (Memory.Send, Memory.Recv). The driver behind Memory is an interface, so
// tests run every staging path on the CPU against a fake device
// (package gputest).
//
// Direct device-to-device transfers (CUDA IPC, gorgonia.org/cu behind a
// cuda build tag) are not implemented: every device transfer is staged
// through host memory (docs/gpu.md).
package gpu
