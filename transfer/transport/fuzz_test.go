package transport

import "testing"

// FuzzSegmentDescriptor checks the descriptor decoder never panics and
// rejects buffers that wrap the address space.
func FuzzSegmentDescriptor(f *testing.F) {
	f.Add([]byte(`{"name":"a","protocol":"tcp","tcp_data_port":1,"buffers":[{"name":"b","addr":1,"length":2}]}`))
	f.Add([]byte(`{"name":"a","buffers":[{"addr":18446744073709551615,"length":2}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeSegmentDesc(b)
		if err != nil {
			return
		}
		for _, buf := range d.Buffers {
			if buf.Addr+buf.Length < buf.Addr {
				t.Fatalf("accepted wrapping buffer %v", buf)
			}
		}
	})
}
