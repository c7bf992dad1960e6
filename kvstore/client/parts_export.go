package client

import "github.com/mooncake-go/mooncake/gpu"

// PartsSize is the total size of parts.
func PartsSize(parts []Part) uint64 { return partsSize(parts) }

// CopyToParts copies data over parts in order (parts must hold it); parts
// in device memory are written through the CUDA driver.
func CopyToParts(parts []Part, data []byte) error { return copyOut(gpu.System(), parts, 0, data) }

// CopyFromParts fills dst from parts in order; parts in device memory are
// read through the CUDA driver.
func CopyFromParts(dst []byte, parts []Part) error { return copyIn(gpu.System(), dst, parts, 0) }
