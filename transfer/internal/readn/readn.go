// Package readn reads a payload whose length another process announced.
// The length is only a claim until the bytes arrive, so the buffer grows
// with the bytes read instead of being allocated whole from the header: a
// peer that sends an 8-byte header announcing a gigabyte and then nothing
// costs its reader one step, not a gigabyte.
package readn

import "io"

// Step is the first allocation for a payload and the least it grows by.
const Step = 1 << 20

// Read returns the next n bytes of r. The caller has already bounded n; the
// buffer holds at most about twice the bytes that arrived. A short read is
// io.ErrUnexpectedEOF (or r's error).
func Read(r io.Reader, n uint64) ([]byte, error) {
	buf := make([]byte, 0, min(n, Step))
	for uint64(len(buf)) < n {
		if len(buf) == cap(buf) {
			grow := min(n-uint64(len(buf)), uint64(max(cap(buf), Step)))
			next := make([]byte, len(buf), uint64(len(buf))+grow)
			copy(next, buf)
			buf = next
		}
		k, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}
