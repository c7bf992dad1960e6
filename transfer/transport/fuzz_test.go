package transport

import "testing"

// FuzzSegmentDescriptor checks the descriptor decoder (fed by etcd, the
// HTTP metadata server and P2P handshakes alike) never panics and rejects
// buffers that wrap the address space and numbers no system call takes.
func FuzzSegmentDescriptor(f *testing.F) {
	f.Add([]byte(`{"name":"a","protocol":"tcp","tcp_data_port":1,"buffers":[{"name":"b","addr":1,"length":2}]}`))
	f.Add([]byte(`{"name":"a","buffers":[{"addr":18446744073709551615,"length":2}]}`))
	f.Add([]byte(`{"name":"a","tcp_data_port":70000}`))
	f.Add([]byte(`{"name":"a","shm_pid":-1,"shm_ctl_fd":3,"buffers":[{"addr":4096,"length":4096,"shm_fd":-5,"shm_ino":9}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeSegmentDesc(b)
		if err != nil {
			return
		}
		if d.Name == "" || d.TCPDataPort < 0 || d.TCPDataPort > 65535 || d.PID < 0 || d.CtlFD < 0 {
			t.Fatalf("accepted %+v", d)
		}
		for _, buf := range d.Buffers {
			if buf.Addr+buf.Length < buf.Addr || buf.ShmFD < 0 {
				t.Fatalf("accepted buffer %v", buf)
			}
			// FindBuffer must agree with the buffer's own bounds.
			if buf.Length > 0 && d.FindBuffer(buf.Addr, buf.Length) < 0 {
				t.Fatalf("FindBuffer misses %v", buf)
			}
		}
	})
}
