// Package gpu owns everything this module knows about NVIDIA GPUs:
// discovery through NVML (github.com/NVIDIA/go-nvml, discover.go) and
// access to device memory through the CUDA driver (cuda_driver.go).
//
// Neither needs CUDA at build time. NVML and libcuda.so.1 are loaded at run
// time; on a machine without them Discover reports ErrNoDriver and every
// pointer is host memory. Device memory is never dereferenced by Go code:
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
