package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer"
)

// benchBuffer is the registered memory one side of the bench moves bytes
// from or into.
type benchBuffer struct {
	addr    uintptr
	size    uint64
	managed bool   // from AllocateManagedBuffer (else mmap + RegisterLocalMemory)
	plain   []byte // the anonymous mapping when !managed
}

// allocBuffer gets size bytes of registered memory: an engine-managed
// (memfd) buffer when managed, else anonymous memory registered as
// "cpu:0", which peers can reach only over TCP. The pages are written
// before returning so page faults do not count against the transfers.
func allocBuffer(e *transfer.Engine, size uint64, managed bool) (*benchBuffer, error) {
	b := &benchBuffer{size: size, managed: managed}
	if managed {
		addr, err := e.AllocateManagedBuffer(size)
		if err != nil {
			return nil, fmt.Errorf("allocate %d-byte managed buffer: %w", size, err)
		}
		b.addr = addr
	} else {
		mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
		}
		b.plain, b.addr = mem, gpu.AddrOf(mem)
		if err := e.RegisterLocalMemory(b.addr, size, "cpu:0"); err != nil {
			unix.Munmap(mem)
			return nil, fmt.Errorf("register %d bytes: %w", size, err)
		}
	}
	fill(b.bytes(), byte(os.Getpid()))
	return b, nil
}

// bytes views the buffer as a slice.
func (b *benchBuffer) bytes() []byte {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&b.addr))
	return unsafe.Slice((*byte)(p), b.size)
}

// free unregisters and releases the buffer.
func (b *benchBuffer) free(e *transfer.Engine) {
	if b.managed {
		e.FreeManagedBuffer(b.addr)
		return
	}
	e.UnregisterLocalMemory(b.addr)
	unix.Munmap(b.plain)
}

// fill writes a pattern over all of mem, faulting every page in.
func fill(mem []byte, seed byte) {
	const chunk = 1 << 16
	var pat [chunk]byte
	for i := range pat {
		pat[i] = byte(i*131) ^ seed
	}
	for off := 0; off < len(mem); off += chunk {
		copy(mem[off:], pat[:])
	}
}

// memfdMappings counts this process's mappings of engine memfds
// ("/memfd:mooncake") of at least size bytes. A rise during a run shows
// that the engine mapped the peer's buffer, i.e. used the shm transport.
func memfdMappings(size uint64) int {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "/memfd:mooncake") {
			continue
		}
		span, _, _ := strings.Cut(line, " ")
		lo, hi, ok := strings.Cut(span, "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		z, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && z-a >= size {
			n++
		}
	}
	return n
}
