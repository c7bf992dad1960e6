package gpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

// The few CUDA driver types this file needs, declared here so that the
// build needs no CUDA headers (values as in cuda.h).
typedef int mc_CUresult;
typedef int mc_CUdevice;
typedef unsigned long long mc_CUdeviceptr;
typedef void *mc_CUcontext;
typedef void *mc_CUstream;

enum {
	MC_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
	MC_POINTER_ATTRIBUTE_IS_MANAGED = 8,
	MC_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
	MC_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
	MC_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
	MC_MEMORYTYPE_DEVICE = 2,
	MC_MEMHOSTALLOC_PORTABLE = 1,
	MC_STREAM_NON_BLOCKING = 1,
	MC_MAX_DEVICES = 64,
	MC_ERR_INVALID_CONTEXT = 201, // CUDA_ERROR_INVALID_CONTEXT
	MC_ERR_BAD_DEVICE = -2,
};

static struct {
	mc_CUresult (*init)(unsigned);
	mc_CUresult (*deviceGetCount)(int *);
	mc_CUresult (*deviceGet)(mc_CUdevice *, int);
	mc_CUresult (*primaryCtxRetain)(mc_CUcontext *, mc_CUdevice);
	mc_CUresult (*ctxPush)(mc_CUcontext);
	mc_CUresult (*ctxPop)(mc_CUcontext *);
	mc_CUresult (*pointerGetAttributes)(unsigned, int *, void **, mc_CUdeviceptr);
	mc_CUresult (*memcpyAsync)(mc_CUdeviceptr, mc_CUdeviceptr, size_t, mc_CUstream);
	mc_CUresult (*memcpyHtoDAsync)(mc_CUdeviceptr, const void *, size_t, mc_CUstream);
	mc_CUresult (*memcpyDtoHAsync)(void *, mc_CUdeviceptr, size_t, mc_CUstream);
	mc_CUresult (*streamCreate)(mc_CUstream *, unsigned);
	mc_CUresult (*streamSynchronize)(mc_CUstream);
	mc_CUresult (*streamDestroy)(mc_CUstream);
	mc_CUresult (*memHostAlloc)(void **, size_t, unsigned);
	mc_CUresult (*memFreeHost)(void *);
	mc_CUresult (*memAlloc)(mc_CUdeviceptr *, size_t);
	mc_CUresult (*memFree)(mc_CUdeviceptr);
	mc_CUresult (*getErrorString)(mc_CUresult, const char **);
	mc_CUcontext ctx[MC_MAX_DEVICES];
	int devices;
} mc_cu;

#define MC_SYM(field, name) \
	if (!(*(void **)(&mc_cu.field) = dlsym(lib, name))) return name;

// mc_cu_open loads libcuda.so.1 and resolves every symbol; it returns NULL
// or the name of what is missing.
static const char *mc_cu_open(void) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) return "libcuda.so.1";
	MC_SYM(init, "cuInit");
	MC_SYM(deviceGetCount, "cuDeviceGetCount");
	MC_SYM(deviceGet, "cuDeviceGet");
	MC_SYM(primaryCtxRetain, "cuDevicePrimaryCtxRetain");
	MC_SYM(ctxPush, "cuCtxPushCurrent_v2");
	MC_SYM(ctxPop, "cuCtxPopCurrent_v2");
	MC_SYM(pointerGetAttributes, "cuPointerGetAttributes");
	MC_SYM(memcpyAsync, "cuMemcpyAsync");
	MC_SYM(memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	MC_SYM(memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	MC_SYM(streamCreate, "cuStreamCreate");
	MC_SYM(streamSynchronize, "cuStreamSynchronize");
	MC_SYM(streamDestroy, "cuStreamDestroy_v2");
	MC_SYM(memHostAlloc, "cuMemHostAlloc");
	MC_SYM(memFreeHost, "cuMemFreeHost");
	MC_SYM(memAlloc, "cuMemAlloc_v2");
	MC_SYM(memFree, "cuMemFree_v2");
	MC_SYM(getErrorString, "cuGetErrorString");
	return NULL;
}

static mc_CUresult mc_cu_init(int *devices) {
	mc_CUresult r = mc_cu.init(0);
	if (r) return r;
	r = mc_cu.deviceGetCount(devices);
	if (r) return r;
	if (*devices > MC_MAX_DEVICES) *devices = MC_MAX_DEVICES;
	mc_cu.devices = *devices;
	return 0;
}

// mc_cu_retain makes device's primary context (the one the CUDA runtime
// and torch use) available to the calls below. Go serialises calls.
static mc_CUresult mc_cu_retain(int device) {
	if (device < 0 || device >= mc_cu.devices) return MC_ERR_BAD_DEVICE;
	if (mc_cu.ctx[device]) return 0;
	mc_CUdevice d;
	mc_CUresult r = mc_cu.deviceGet(&d, device);
	if (r) return r;
	return mc_cu.primaryCtxRetain(&mc_cu.ctx[device], d);
}

// Every call that needs a context pushes the device's primary context and
// pops it again in the same C call, so it runs on one OS thread whatever
// goroutine scheduling does.
static mc_CUresult mc_cu_push(int device) {
	if (device < 0 || device >= mc_cu.devices || !mc_cu.ctx[device]) return MC_ERR_BAD_DEVICE;
	return mc_cu.ctxPush(mc_cu.ctx[device]);
}

static void mc_cu_pop(void) {
	mc_CUcontext c;
	mc_cu.ctxPop(&c);
}

// MC_IN_CTX runs one driver call with device's primary context current.
#define MC_IN_CTX(device, call)                  \
	do {                                         \
		mc_CUresult r_ = mc_cu_push(device);     \
		if (r_) return r_;                       \
		r_ = (call);                             \
		mc_cu_pop();                             \
		return r_;                               \
	} while (0)

// mc_cu_pointer classifies p; in_ctx: with device 0's primary context
// current (for drivers that refuse the query without a context).
static mc_CUresult mc_cu_pointer(uintptr_t p, int in_ctx, unsigned *type, unsigned *managed,
                                 int *ordinal, mc_CUdeviceptr *start, size_t *size) {
	int attrs[5] = {MC_POINTER_ATTRIBUTE_MEMORY_TYPE, MC_POINTER_ATTRIBUTE_IS_MANAGED,
	                MC_POINTER_ATTRIBUTE_DEVICE_ORDINAL, MC_POINTER_ATTRIBUTE_RANGE_START_ADDR,
	                MC_POINTER_ATTRIBUTE_RANGE_SIZE};
	void *data[5] = {type, managed, ordinal, start, size};
	*type = 0, *managed = 0, *ordinal = -1, *start = 0, *size = 0;
	if (in_ctx) MC_IN_CTX(0, mc_cu.pointerGetAttributes(5, attrs, data, (mc_CUdeviceptr)p));
	return mc_cu.pointerGetAttributes(5, attrs, data, (mc_CUdeviceptr)p);
}

// mc_cu_copy copies between any two kinds of memory on stream s and waits
// for it: cuMemcpy alone may return before a device-to-device copy is done.
static mc_CUresult mc_cu_copy(int device, uintptr_t dst, uintptr_t src, size_t n, uintptr_t s) {
	mc_CUresult r = mc_cu_push(device);
	if (r) return r;
	r = mc_cu.memcpyAsync((mc_CUdeviceptr)dst, (mc_CUdeviceptr)src, n, (mc_CUstream)s);
	if (!r) r = mc_cu.streamSynchronize((mc_CUstream)s);
	mc_cu_pop();
	return r;
}

static mc_CUresult mc_cu_htod_async(int device, uintptr_t dst, uintptr_t src, size_t n, uintptr_t s) {
	MC_IN_CTX(device, mc_cu.memcpyHtoDAsync((mc_CUdeviceptr)dst, (const void *)src, n, (mc_CUstream)s));
}

static mc_CUresult mc_cu_dtoh_async(int device, uintptr_t dst, uintptr_t src, size_t n, uintptr_t s) {
	MC_IN_CTX(device, mc_cu.memcpyDtoHAsync((void *)dst, (mc_CUdeviceptr)src, n, (mc_CUstream)s));
}

static mc_CUresult mc_cu_stream_create(int device, mc_CUstream *s) {
	MC_IN_CTX(device, mc_cu.streamCreate(s, MC_STREAM_NON_BLOCKING));
}

static mc_CUresult mc_cu_stream_sync(int device, uintptr_t s) {
	MC_IN_CTX(device, mc_cu.streamSynchronize((mc_CUstream)s));
}

static mc_CUresult mc_cu_stream_destroy(int device, uintptr_t s) {
	MC_IN_CTX(device, mc_cu.streamDestroy((mc_CUstream)s));
}

static mc_CUresult mc_cu_host_alloc(int device, size_t n, void **p) {
	MC_IN_CTX(device, mc_cu.memHostAlloc(p, n, MC_MEMHOSTALLOC_PORTABLE));
}

static mc_CUresult mc_cu_host_free(int device, uintptr_t p) {
	MC_IN_CTX(device, mc_cu.memFreeHost((void *)p));
}

static mc_CUresult mc_cu_mem_alloc(int device, size_t n, mc_CUdeviceptr *p) {
	MC_IN_CTX(device, mc_cu.memAlloc(p, n));
}

static mc_CUresult mc_cu_mem_free(int device, uintptr_t p) {
	MC_IN_CTX(device, mc_cu.memFree((mc_CUdeviceptr)p));
}

static const char *mc_cu_error(mc_CUresult r) {
	const char *s = 0;
	if (r == MC_ERR_BAD_DEVICE) return "no such device";
	if (mc_cu.getErrorString(r, &s) || !s) return "unknown CUDA error";
	return s;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// cudaNoDevice is CUDA_ERROR_NO_DEVICE: the driver is installed but sees
// no GPU.
const cudaNoDevice = 100

// CUDAError is a failed CUDA driver call.
type CUDAError struct {
	Call string
	Code int
	Msg  string
}

func (e *CUDAError) Error() string {
	return fmt.Sprintf("gpu: %s: CUDA error %d (%s)", e.Call, e.Code, e.Msg)
}

func cudaErr(call string, r C.mc_CUresult) error {
	if r == 0 {
		return nil
	}
	return &CUDAError{Call: call, Code: int(r), Msg: C.GoString(C.mc_cu_error(r))}
}

// cudaDriver is the CUDA driver loaded at run time. One exists per process
// (the C side's function table is global).
type cudaDriver struct {
	devices int
	mu      sync.Mutex // serialises primary-context retains
	ready   [C.MC_MAX_DEVICES]bool
	// copyStreams holds idle streams for Copy, by device.
	copyMu      sync.Mutex
	copyStreams map[int][]Stream
}

// maxIdleCopyStreams bounds the idle streams Copy keeps per device.
const maxIdleCopyStreams = 8

var openCUDA = sync.OnceValues(func() (*cudaDriver, error) {
	if missing := C.mc_cu_open(); missing != nil {
		return nil, fmt.Errorf("%w: %s not found", ErrNoCUDA, C.GoString(missing))
	}
	var n C.int
	if r := C.mc_cu_init(&n); r != 0 {
		if r == cudaNoDevice {
			return nil, fmt.Errorf("%w: %v", ErrNoCUDA, cudaErr("cuInit", r))
		}
		return nil, cudaErr("cuInit", r)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: cuDeviceGetCount reports 0 devices", ErrNoCUDA)
	}
	return &cudaDriver{devices: int(n), copyStreams: map[int][]Stream{}}, nil
})

// OpenCUDA loads libcuda.so.1 and initialises it (once per process). Its
// error wraps ErrNoCUDA when there is no driver or no device.
func OpenCUDA() (Driver, error) {
	d, err := openCUDA()
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Devices is the number of CUDA devices the driver sees.
func (d *cudaDriver) Devices() int { return d.devices }

// context makes sure device's primary context is retained.
func (d *cudaDriver) context(device int) error {
	if device < 0 || device >= d.devices {
		return fmt.Errorf("gpu: device %d: have %d", device, d.devices)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ready[device] {
		return nil
	}
	if err := cudaErr("cuDevicePrimaryCtxRetain", C.mc_cu_retain(C.int(device))); err != nil {
		return err
	}
	d.ready[device] = true
	return nil
}

func (d *cudaDriver) Pointer(addr uintptr) (PointerInfo, error) {
	var typ, managed C.unsigned
	var ordinal C.int
	var start C.mc_CUdeviceptr
	var size C.size_t
	r := C.mc_cu_pointer(C.uintptr_t(addr), 0, &typ, &managed, &ordinal, &start, &size)
	if r == C.MC_ERR_INVALID_CONTEXT {
		// The driver wants a current context for the query: device 0's
		// primary one (retained only now, as creating it costs memory).
		if err := d.context(0); err != nil {
			return PointerInfo{}, err
		}
		r = C.mc_cu_pointer(C.uintptr_t(addr), 1, &typ, &managed, &ordinal, &start, &size)
	}
	if err := cudaErr("cuPointerGetAttributes", r); err != nil {
		return PointerInfo{}, err
	}
	if typ != C.MC_MEMORYTYPE_DEVICE {
		return PointerInfo{Kind: KindHost}, nil
	}
	info := PointerInfo{Kind: KindDevice, Device: int(ordinal), Base: uintptr(start), Size: uint64(size)}
	if managed != 0 {
		info.Kind = KindManaged
	}
	return info, nil
}

// Copy runs cuMemcpyAsync on a stream of its own and waits for it.
func (d *cudaDriver) Copy(dst, src uintptr, n uint64, device int) error {
	s, err := d.copyStream(device)
	if err != nil {
		return err
	}
	err = cudaErr("cuMemcpyAsync", C.mc_cu_copy(C.int(device), C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.uintptr_t(s.Handle)))
	d.copyMu.Lock()
	if err == nil && len(d.copyStreams[device]) < maxIdleCopyStreams {
		d.copyStreams[device] = append(d.copyStreams[device], s)
		s.Handle = 0
	}
	d.copyMu.Unlock()
	if s.Handle != 0 {
		d.StreamDestroy(s)
	}
	return err
}

// copyStream takes an idle Copy stream of device or makes one.
func (d *cudaDriver) copyStream(device int) (Stream, error) {
	d.copyMu.Lock()
	if ss := d.copyStreams[device]; len(ss) > 0 {
		s := ss[len(ss)-1]
		d.copyStreams[device] = ss[:len(ss)-1]
		d.copyMu.Unlock()
		return s, nil
	}
	d.copyMu.Unlock()
	return d.StreamCreate(device)
}

func (d *cudaDriver) CopyHtoDAsync(dst, src uintptr, n uint64, s Stream) error {
	return cudaErr("cuMemcpyHtoDAsync", C.mc_cu_htod_async(C.int(s.Device), C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.uintptr_t(s.Handle)))
}

func (d *cudaDriver) CopyDtoHAsync(dst, src uintptr, n uint64, s Stream) error {
	return cudaErr("cuMemcpyDtoHAsync", C.mc_cu_dtoh_async(C.int(s.Device), C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.uintptr_t(s.Handle)))
}

func (d *cudaDriver) StreamCreate(device int) (Stream, error) {
	if err := d.context(device); err != nil {
		return Stream{}, err
	}
	var h C.mc_CUstream
	if err := cudaErr("cuStreamCreate", C.mc_cu_stream_create(C.int(device), &h)); err != nil {
		return Stream{}, err
	}
	return Stream{Handle: uintptr(h), Device: device}, nil
}

func (d *cudaDriver) StreamSynchronize(s Stream) error {
	return cudaErr("cuStreamSynchronize", C.mc_cu_stream_sync(C.int(s.Device), C.uintptr_t(s.Handle)))
}

func (d *cudaDriver) StreamDestroy(s Stream) error {
	return cudaErr("cuStreamDestroy", C.mc_cu_stream_destroy(C.int(s.Device), C.uintptr_t(s.Handle)))
}

// HostAlloc allocates portable pinned memory in device 0's primary
// context; portable memory is pinned for every context.
func (d *cudaDriver) HostAlloc(n uint64) (uintptr, error) {
	if err := d.context(0); err != nil {
		return 0, err
	}
	var p unsafe.Pointer
	if err := cudaErr("cuMemHostAlloc", C.mc_cu_host_alloc(0, C.size_t(n), &p)); err != nil {
		return 0, err
	}
	return uintptr(p), nil
}

func (d *cudaDriver) HostFree(addr uintptr) error {
	return cudaErr("cuMemFreeHost", C.mc_cu_host_free(0, C.uintptr_t(addr)))
}

func (d *cudaDriver) DeviceAlloc(device int, n uint64) (uintptr, error) {
	if err := d.context(device); err != nil {
		return 0, err
	}
	var p C.mc_CUdeviceptr
	if err := cudaErr("cuMemAlloc", C.mc_cu_mem_alloc(C.int(device), C.size_t(n), &p)); err != nil {
		return 0, err
	}
	return uintptr(p), nil
}

// DeviceFree frees memory from DeviceAlloc.
func (d *cudaDriver) DeviceFree(addr uintptr) error {
	info, err := d.Pointer(addr)
	if err != nil {
		return err
	}
	return cudaErr("cuMemFree", C.mc_cu_mem_free(C.int(info.Device), C.uintptr_t(addr)))
}
