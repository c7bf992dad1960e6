package gpu_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"testing"
	"unsafe"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/gpu/gputest"
)

// drivers lists the drivers to test against: the fake always, the real
// one where a GPU is present.
func drivers(t *testing.T) map[string]gputest.Device {
	out, err := gputest.Available()
	if err != nil {
		t.Fatalf("OpenCUDA: %v", err)
	}
	return out
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestNoDriverIsHostOnly(t *testing.T) {
	m := gpu.NewMemory(nil, 0)
	if m.Enabled() {
		t.Fatal("a Memory without driver claims a GPU")
	}
	src, dst := pattern(100, 1), make([]byte, 100)
	info, err := m.Range(gpu.AddrOf(src), 100)
	if err != nil || info.Kind != gpu.KindHost || !info.HostAccessible() {
		t.Fatalf("Range = %+v, %v", info, err)
	}
	if err := m.Copy(gpu.AddrOf(dst), gpu.AddrOf(src), 100); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("Copy: %v", err)
	}
	var w bytes.Buffer
	if err := m.Send(&w, gpu.AddrOf(src), 100); err != nil || !bytes.Equal(w.Bytes(), src) {
		t.Fatalf("Send: %v", err)
	}
	got := make([]byte, 100)
	if err := m.Recv(bytes.NewReader(src), gpu.AddrOf(got), 100); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("Recv: %v", err)
	}
}

// TestSystemWithoutCUDA checks the process Memory against the machine: on
// one without libcuda.so.1 it is host-only and OpenCUDA says ErrNoCUDA.
func TestSystemWithoutCUDA(t *testing.T) {
	_, err := gpu.OpenCUDA()
	if err == nil {
		if !gpu.System().Enabled() {
			t.Fatal("CUDA opened but System is host-only")
		}
		t.Skip("this machine has a CUDA device")
	}
	if !errors.Is(err, gpu.ErrNoCUDA) {
		t.Fatalf("OpenCUDA: %v, want ErrNoCUDA", err)
	}
	if gpu.System().Enabled() {
		t.Fatal("System claims a GPU without a driver")
	}
	if info, err := gpu.System().Pointer(0x1000); err != nil || info.Kind != gpu.KindHost {
		t.Fatalf("Pointer = %+v, %v", info, err)
	}
}

// sink keeps a read from being optimised away.
var sink byte

func TestFakeDeviceMemoryFaultsOnDirectAccess(t *testing.T) {
	d := gputest.New()
	p, err := d.DeviceAlloc(0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.DeviceFree(p)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	faulted := func() (f bool) {
		defer func() { f = recover() != nil }()
		b := unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), 1)
		sink = b[0]
		return false
	}()
	if !faulted {
		t.Fatal("reading fake device memory directly did not fault")
	}
}

func TestRangeAndCopy(t *testing.T) {
	// A power of two, so that a real driver's allocation granularity
	// cannot make the allocation larger than asked.
	const n = 1 << 20
	for name, d := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			m := gpu.NewMemory(d, 0)
			defer m.Close()
			p, err := d.DeviceAlloc(0, n)
			if err != nil {
				t.Fatal(err)
			}
			defer d.DeviceFree(p)
			info, err := m.Range(p+10, n-10)
			if err != nil || info.Kind != gpu.KindDevice || info.HostAccessible() || info.Base != p {
				t.Fatalf("Range = %+v, %v", info, err)
			}
			if _, err := m.Range(p+10, n-9); !errors.Is(err, gpu.ErrOutsideAllocation) {
				t.Fatalf("Range past the allocation: %v", err)
			}
			src := pattern(n, 3)
			if err := m.CopyFromHost(p, src); err != nil {
				t.Fatal(err)
			}
			// Device to device, then back to host.
			q, err := d.DeviceAlloc(0, n)
			if err != nil {
				t.Fatal(err)
			}
			defer d.DeviceFree(q)
			if err := m.Copy(q, p, n); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n)
			if err := m.CopyToHost(got, q); err != nil || !bytes.Equal(got, src) {
				t.Fatalf("round trip through device: %v", err)
			}
		})
	}
}

func TestManagedMemoryIsHostAccessible(t *testing.T) {
	d := gputest.New()
	p, err := d.ManagedAlloc(0, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer d.DeviceFree(p)
	m := gpu.NewMemory(d, 0)
	info, err := m.Range(p, 64)
	if err != nil || info.Kind != gpu.KindManaged || !info.HostAccessible() {
		t.Fatalf("Range = %+v, %v", info, err)
	}
	var w bytes.Buffer
	if err := m.Send(&w, p, 64); err != nil || w.Len() != 64 {
		t.Fatalf("Send: %v (%d bytes)", err, w.Len())
	}
	if s := d.Stats(); s.AsyncCopies != 0 {
		t.Fatalf("managed memory was staged: %+v", s)
	}
}

// TestStagedStreams sends device memory into a pipe and receives it into
// other device memory, for sizes around the chunk boundaries.
func TestStagedStreams(t *testing.T) {
	const chunk = 4096
	for name, d := range drivers(t) {
		t.Run(name, func(t *testing.T) {
			m := gpu.NewMemory(d, chunk)
			for _, n := range []int{1, chunk - 1, chunk, chunk + 1, 2 * chunk, 5*chunk + 3} {
				src, err := d.DeviceAlloc(0, uint64(n))
				if err != nil {
					t.Fatal(err)
				}
				dst, err := d.DeviceAlloc(0, uint64(n))
				if err != nil {
					t.Fatal(err)
				}
				want := pattern(n, byte(n))
				if err := m.CopyFromHost(src, want); err != nil {
					t.Fatal(err)
				}
				r, w := io.Pipe()
				sendErr := make(chan error, 1)
				go func() {
					err := m.Send(w, src, uint64(n))
					w.CloseWithError(err)
					sendErr <- err
				}()
				if err := m.Recv(r, dst, uint64(n)); err != nil {
					t.Fatalf("n=%d: Recv: %v", n, err)
				}
				if err := <-sendErr; err != nil {
					t.Fatalf("n=%d: Send: %v", n, err)
				}
				got := make([]byte, n)
				if err := m.CopyToHost(got, dst); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("n=%d: data differs after a staged round trip (%v)", n, err)
				}
				d.DeviceFree(src)
				d.DeviceFree(dst)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if f, ok := d.(*gputest.Driver); ok {
				if s := f.Stats(); s.PinnedLive != 0 || s.StreamsLive != 0 || s.AsyncCopies == 0 {
					t.Fatalf("after Close: %+v", s)
				}
			}
		})
	}
}

func TestStagedStreamsConcurrent(t *testing.T) {
	d := gputest.New()
	m := gpu.NewMemory(d, 1024)
	const n = 10*1024 + 5
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, _ := d.DeviceAlloc(0, n)
			defer d.DeviceFree(p)
			want := pattern(n, byte(i))
			if err := m.Recv(bytes.NewReader(want), p, n); err != nil {
				errs <- err
				return
			}
			var w bytes.Buffer
			if err := m.Send(&w, p, n); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(w.Bytes(), want) {
				errs <- fmt.Errorf("goroutine %d: data differs", i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	m.Close()
	if s := d.Stats(); s.PinnedLive != 0 || s.StreamsLive != 0 {
		t.Fatalf("lanes leaked: %+v", s)
	}
}

type failingWriter struct{ left int }

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.left <= 0 {
		return 0, io.ErrClosedPipe
	}
	w.left--
	return len(b), nil
}

// TestStagedStreamFailure: a connection failing mid-stream fails the call,
// and the lane (whose copies are settled) serves the next one.
func TestStagedStreamFailure(t *testing.T) {
	d := gputest.New()
	m := gpu.NewMemory(d, 1024)
	defer m.Close()
	p, _ := d.DeviceAlloc(0, 8*1024)
	defer d.DeviceFree(p)
	if err := m.Send(&failingWriter{left: 2}, p, 8*1024); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Send into a failing writer: %v", err)
	}
	if err := m.Recv(bytes.NewReader(make([]byte, 3000)), p, 8*1024); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Recv from a short reader: %v", err)
	}
	want := pattern(8*1024, 9)
	if err := m.Recv(bytes.NewReader(want), p, 8*1024); err != nil {
		t.Fatal(err)
	}
	got, _ := d.Read(p, 8*1024)
	if !bytes.Equal(got, want) {
		t.Fatal("data differs after a failed stream")
	}
	if s := d.Stats(); s.PinnedLive != 2 {
		t.Fatalf("want one lane kept for reuse, have %+v", s)
	}
}

func TestAsyncCopyNeedsPinnedMemory(t *testing.T) {
	d := gputest.New()
	p, _ := d.DeviceAlloc(0, 64)
	defer d.DeviceFree(p)
	s, _ := d.StreamCreate(0)
	defer d.StreamDestroy(s)
	host := make([]byte, 64)
	if err := d.CopyDtoHAsync(gpu.AddrOf(host), p, 64, s); err == nil {
		t.Fatal("fake accepted an async copy into pageable memory")
	}
}

// TestAddrOfAndHostBytesAreInverse: the project's one pair of address
// conversions views the same memory both ways.
func TestAddrOfAndHostBytesAreInverse(t *testing.T) {
	b := make([]byte, 8)
	copy(b, "mooncake")
	view := gpu.HostBytes(gpu.AddrOf(b), uint64(len(b)))
	if len(view) != len(b) || &view[0] != &b[0] {
		t.Fatalf("HostBytes(AddrOf(b)) is not b: %q", view)
	}
	view[0] = 'M'
	if b[0] != 'M' {
		t.Fatal("a write through the view did not reach b")
	}
	if gpu.AddrOf(b[3:]) != gpu.AddrOf(b)+3 {
		t.Fatal("AddrOf of a subslice is not its first byte")
	}
	if gpu.AddrOf(nil) != 0 || gpu.HostBytes(gpu.AddrOf(b), 0) != nil {
		t.Fatal("nil and empty views")
	}
}
