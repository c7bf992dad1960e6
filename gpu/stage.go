package gpu

import (
	"errors"
	"io"
)

// lane is what one staged stream uses: two pinned host chunks, each with
// its own stream, so that a copy into one chunk overlaps the network I/O
// of the other.
type lane struct {
	device  int
	buf     [2]uintptr
	streams [2]Stream
}

func (m *Memory) newLane(device int) (*lane, error) {
	l := &lane{device: device}
	for i := range 2 {
		b, err := m.drv.HostAlloc(m.chunk)
		if err != nil {
			l.free(m.drv)
			return nil, err
		}
		l.buf[i] = b
		s, err := m.drv.StreamCreate(device)
		if err != nil {
			l.free(m.drv)
			return nil, err
		}
		l.streams[i] = s
	}
	return l, nil
}

// free releases what the lane holds (what it has, when half built).
func (l *lane) free(d Driver) error {
	var errs []error
	for i := range 2 {
		if l.streams[i].Handle != 0 {
			errs = append(errs, d.StreamDestroy(l.streams[i]))
		}
		if l.buf[i] != 0 {
			errs = append(errs, d.HostFree(l.buf[i]))
		}
	}
	return errors.Join(errs...)
}

// getLane takes an idle lane of device or makes one.
func (m *Memory) getLane(device int) (*lane, error) {
	m.mu.Lock()
	if ls := m.idle[device]; len(ls) > 0 {
		l := ls[len(ls)-1]
		m.idle[device] = ls[:len(ls)-1]
		m.mu.Unlock()
		return l, nil
	}
	m.mu.Unlock()
	return m.newLane(device)
}

// putLane returns a lane whose streams are idle.
func (m *Memory) putLane(l *lane) {
	m.mu.Lock()
	if !m.closed && len(m.idle[l.device]) < maxIdleLanes {
		m.idle[l.device] = append(m.idle[l.device], l)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	l.free(m.drv)
}

// settle waits for both of the lane's streams, so that no copy is left
// touching its chunks; it returns the lane to the pool only if both
// synchronised (a lane in an unknown state is freed).
func (m *Memory) settle(l *lane) error {
	err := errors.Join(m.drv.StreamSynchronize(l.streams[0]), m.drv.StreamSynchronize(l.streams[1]))
	if err != nil {
		l.free(m.drv)
		return err
	}
	m.putLane(l)
	return nil
}

// chunks is the number of chunks of an n-byte stream; chunkAt gives chunk
// k's offset and size.
func (m *Memory) chunks(n uint64) int { return int((n + m.chunk - 1) / m.chunk) }

func (m *Memory) chunkAt(k int, n uint64) (off, size uint64) {
	off = uint64(k) * m.chunk
	return off, min(m.chunk, n-off)
}

// Send writes n bytes of memory at src to w. Host memory is written as is;
// device memory goes through pinned chunks, the device-to-host copy of
// chunk k+1 running while chunk k is written. w never sees a device
// address.
func (m *Memory) Send(w io.Writer, src uintptr, n uint64) error {
	info, err := m.Range(src, n)
	if err != nil {
		return err
	}
	if info.HostAccessible() {
		_, err := w.Write(HostBytes(src, n))
		return err
	}
	return m.SendDevice(w, src, n, info.Device)
}

// SendDevice is Send for a range already known to be on device.
func (m *Memory) SendDevice(w io.Writer, src uintptr, n uint64, device int) error {
	if n == 0 {
		return nil
	}
	l, err := m.getLane(device)
	if err != nil {
		return err
	}
	fetch := func(k int) error {
		off, size := m.chunkAt(k, n)
		return m.drv.CopyDtoHAsync(l.buf[k%2], src+uintptr(off), size, l.streams[k%2])
	}
	err = fetch(0)
	for k, total := 0, m.chunks(n); err == nil && k < total; k++ {
		// Chunk k+1's buffer held chunk k-1, which is written already.
		if k+1 < total {
			if err = fetch(k + 1); err != nil {
				break
			}
		}
		if err = m.drv.StreamSynchronize(l.streams[k%2]); err != nil {
			break
		}
		_, size := m.chunkAt(k, n)
		_, err = w.Write(HostBytes(l.buf[k%2], size))
	}
	return errors.Join(err, m.settle(l))
}

// Recv reads n bytes from r into memory at dst. Host memory is filled
// directly; device memory is filled through pinned chunks, the
// host-to-device copy of chunk k running while chunk k+1 is read.
func (m *Memory) Recv(r io.Reader, dst uintptr, n uint64) error {
	info, err := m.Range(dst, n)
	if err != nil {
		return err
	}
	if info.HostAccessible() {
		_, err := io.ReadFull(r, HostBytes(dst, n))
		return err
	}
	return m.RecvDevice(r, dst, n, info.Device)
}

// RecvDevice is Recv for a range already known to be on device.
func (m *Memory) RecvDevice(r io.Reader, dst uintptr, n uint64, device int) error {
	if n == 0 {
		return nil
	}
	l, err := m.getLane(device)
	if err != nil {
		return err
	}
	for k, total := 0, m.chunks(n); k < total; k++ {
		b := k % 2
		if k >= 2 {
			// The buffer's previous chunk must be on the device first.
			if err = m.drv.StreamSynchronize(l.streams[b]); err != nil {
				break
			}
		}
		off, size := m.chunkAt(k, n)
		if _, err = io.ReadFull(r, HostBytes(l.buf[b], size)); err != nil {
			break
		}
		if err = m.drv.CopyHtoDAsync(dst+uintptr(off), l.buf[b], size, l.streams[b]); err != nil {
			break
		}
	}
	return errors.Join(err, m.settle(l))
}
