package transfer

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/gpu/gputest"
)

// deviceChunk is small so that every TCP slice stages in several chunks.
const deviceChunk = 64 << 10

// devices lists the devices to test against: the fake always, the real
// CUDA driver where a GPU is present.
func devices(t *testing.T) map[string]gputest.Device {
	t.Helper()
	out, err := gputest.Available()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newDeviceEngine starts a P2P engine whose GPU memory access is d.
func newDeviceEngine(t *testing.T, d gputest.Device, forceTCP bool) *Engine {
	t.Helper()
	m := gpu.NewMemory(d, deviceChunk)
	e, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, ForceTCP: forceTCP, TransferTimeout: 5 * time.Second, Memory: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// deviceBuf allocates device memory holding data.
func deviceBuf(t *testing.T, d gputest.Device, data []byte) uintptr {
	t.Helper()
	p, err := gputest.Upload(d, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.DeviceFree(p) })
	return p
}

func deviceBytes(t *testing.T, d gputest.Device, p uintptr, n int) []byte {
	t.Helper()
	b, err := gputest.Download(d, p, uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDeviceTransfers moves bytes between device and host memory, and
// between device memories, in both directions, over every route: TCP, a
// same-host peer's shared buffer, and the engine's own segment. Fake
// device memory faults on direct access, so a path that dereferenced it
// would crash the test; with a GPU, the same runs on real device memory.
func TestDeviceTransfers(t *testing.T) {
	for name, d := range devices(t) {
		t.Run(name, func(t *testing.T) { testDeviceTransfers(t, d) })
	}
}

func testDeviceTransfers(t *testing.T, d gputest.Device) {
	const n = 9<<20 + 123 // several TCP slices, several chunks each, odd tail
	for _, tc := range []struct {
		name           string
		forceTCP, self bool
		localDevice    bool
		remoteDevice   bool
	}{
		{"tcp/device-to-host", true, false, true, false},
		{"tcp/host-to-device", true, false, false, true},
		{"tcp/device-to-device", true, false, true, true},
		{"shm/device-to-host", false, false, true, false},
		{"shm-peer/host-to-device", false, false, false, true},
		{"self/device-to-device", false, true, true, true},
		{"self/device-to-host", false, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			initiator := newDeviceEngine(t, d, tc.forceTCP)
			target := initiator
			if !tc.self {
				target = newDeviceEngine(t, d, tc.forceTCP)
			}
			// Memory on either side, with its contents read back through
			// the driver (device) or directly (host).
			side := func(e *Engine, device bool, seed byte) (uintptr, func() []byte) {
				want := pattern(n, seed)
				if device {
					p := deviceBuf(t, d, want)
					if err := e.RegisterLocalMemory(p, n, "*"); err != nil {
						t.Fatal(err)
					}
					return p, func() []byte { return deviceBytes(t, d, p, n) }
				}
				b := managed(t, e, n)
				copy(b, want)
				return gpu.AddrOf(b), func() []byte { return append([]byte(nil), b...) }
			}
			local, readLocal := side(initiator, tc.localDevice, 1)
			remote, readRemote := side(target, tc.remoteDevice, 2)
			write := []Request{{Opcode: OpWrite, Source: local, TargetOffset: uint64(remote), Length: n}}
			if err := initiator.TransferSync(target.Name(), write); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readRemote(), pattern(n, 1)) {
				t.Fatal("WRITE: remote differs from local")
			}
			if err := target.WriteLocal(remote, pattern(n, 3)); err != nil {
				t.Fatal(err)
			}
			read := []Request{{Opcode: OpRead, Source: local, TargetOffset: uint64(remote), Length: n}}
			if err := initiator.TransferSync(target.Name(), read); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readLocal(), pattern(n, 3)) {
				t.Fatal("READ: local differs from remote")
			}
			got := make([]byte, n)
			if err := target.ReadLocal(remote, got); err != nil || !bytes.Equal(got, pattern(n, 3)) {
				t.Fatalf("ReadLocal: %v", err)
			}
			if f, ok := d.(*gputest.Driver); ok && (tc.localDevice || tc.remoteDevice) && f.Stats().AsyncCopies+f.Stats().SyncCopies == 0 {
				t.Fatal("device memory moved without the driver")
			}
		})
	}
}

// TestDeviceTransferBatch runs many device requests of one batch at once
// over TCP, each into its own place, with data checked.
func TestDeviceTransferBatch(t *testing.T) {
	for name, d := range devices(t) {
		t.Run(name, func(t *testing.T) { testDeviceTransferBatch(t, d) })
	}
}

func testDeviceTransferBatch(t *testing.T, d gputest.Device) {
	const n, k = 300 << 10, 12
	initiator := newDeviceEngine(t, d, true)
	target := newDeviceEngine(t, d, true)
	src := deviceBuf(t, d, pattern(n*k, 5))
	dst := deviceBuf(t, d, make([]byte, n*k))
	if err := initiator.RegisterLocalOnly(src, n*k); err != nil {
		t.Fatal(err)
	}
	if err := target.RegisterLocalMemory(dst, n*k, "cuda:0"); err != nil {
		t.Fatal(err)
	}
	reqs := make([]Request, k)
	for i := range reqs {
		// Reverse the order of the pieces, so that a misplaced one shows.
		reqs[i] = Request{Opcode: OpWrite, Source: src + uintptr(i*n), TargetOffset: uint64(dst) + uint64((k-1-i)*n), Length: n}
	}
	if err := initiator.TransferSync(target.Name(), reqs); err != nil {
		t.Fatal(err)
	}
	got, want := deviceBytes(t, d, dst, n*k), pattern(n*k, 5)
	for i := range k {
		if !bytes.Equal(got[(k-1-i)*n:(k-i)*n], want[i*n:(i+1)*n]) {
			t.Fatalf("piece %d misplaced", i)
		}
	}
}

func TestDeviceRegistration(t *testing.T) {
	for name, d := range devices(t) {
		t.Run(name, func(t *testing.T) { testDeviceRegistration(t, d) })
	}
}

func testDeviceRegistration(t *testing.T, d gputest.Device) {
	const n = 1 << 20 // a power of two: no allocation granularity rounds it up
	e := newDeviceEngine(t, d, false)
	p := deviceBuf(t, d, make([]byte, n))
	if err := e.RegisterLocalMemory(p, n+1, "*"); err == nil || !errors.Is(err, gpu.ErrOutsideAllocation) {
		t.Fatalf("registering past the allocation: %v", err)
	}
	if err := e.BatchRegisterLocalMemory([]uintptr{p}, []uint64{n}, "*"); err != nil {
		t.Fatal(err)
	}
	desc := e.descriptor()
	if len(desc.Buffers) != 1 || !strings.HasPrefix(desc.Buffers[0].Name, "cuda:0@") || desc.Buffers[0].ShmFD != 0 {
		t.Fatalf("device buffer published as %+v", desc.Buffers)
	}
	h, err := e.CachedSegment(e.Name())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := e.AccessRemote(h, uint64(p), 16, func([]byte) { t.Fatal("a host view of device memory") }); ok || err != nil {
		t.Fatalf("AccessRemote of device memory = %v, %v; want false, nil", ok, err)
	}
	if err := e.UnregisterLocalMemory(p); err != nil {
		t.Fatal(err)
	}
}

// TestNoDriverRegistersHost: with a host-only Memory (no driver), memory
// registers as host memory and transfers copy it directly.
func TestNoDriverRegistersHost(t *testing.T) {
	e, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, Memory: gpu.NewMemory(nil, 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	b := pattern(1000, 4)
	if err := e.RegisterLocalMemory(gpu.AddrOf(b), 1000, "*"); err != nil {
		t.Fatal(err)
	}
	if r := e.reg.find(gpu.AddrOf(b), 1000); r == nil || r.placement.Device || r.location != "*" {
		t.Fatalf("region = %+v", r)
	}
	e.UnregisterLocalMemory(gpu.AddrOf(b))
}
