// Package gpu discovers NVIDIA GPUs through NVML (github.com/NVIDIA/go-nvml).
//
// NVML is loaded at run time, so this package builds and runs on machines
// without a GPU or driver: Discover then reports ErrNoDriver. Device memory
// management (gorgonia.org/cu, build tag cuda) is not implemented yet; the
// collectives and the store stage CUDA tensors through host memory.
package gpu
