package gputest

import (
	"errors"

	"github.com/mooncake-go/mooncake/gpu"
)

// Device is a driver that can also allocate device memory: the fake, or
// the real CUDA driver.
type Device interface {
	gpu.Driver
	gpu.DeviceAllocator
}

// Available returns the devices tests run against, by name: "fake"
// always, and "cuda" where a CUDA device is present. An error other than
// gpu.ErrNoCUDA (a driver that is there but fails) is returned.
func Available() (map[string]Device, error) {
	out := map[string]Device{"fake": New()}
	d, err := gpu.OpenCUDA()
	if err == nil {
		out["cuda"] = d.(Device)
	} else if !errors.Is(err, gpu.ErrNoCUDA) {
		return out, err
	}
	return out, nil
}

// Upload allocates device memory on GPU 0 of d holding a copy of data.
func Upload(d Device, data []byte) (uintptr, error) {
	p, err := d.DeviceAlloc(0, uint64(len(data)))
	if err != nil {
		return 0, err
	}
	if err := gpu.NewMemory(d, 0).CopyFromHost(p, data); err != nil {
		d.DeviceFree(p)
		return 0, err
	}
	return p, nil
}

// Download returns a copy of n bytes of memory at p (device or host).
func Download(d Device, p uintptr, n uint64) ([]byte, error) {
	b := make([]byte, n)
	return b, gpu.NewMemory(d, 0).CopyToHost(b, p)
}
