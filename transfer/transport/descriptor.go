package transport

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/mooncake-go/mooncake/transfer/errcode"
)

// BufferDesc describes one registered buffer of a segment.
type BufferDesc struct {
	Name   string `json:"name"`
	Addr   uint64 `json:"addr"`
	Length uint64 `json:"length"`
	// ShmFD and ShmInode locate the memfd behind an engine-allocated buffer
	// (through /proc/<pid>/fd/<fd>) for peers on the same host. Both are zero
	// for buffers that only TCP can reach.
	ShmFD    int    `json:"shm_fd,omitempty"`
	ShmInode uint64 `json:"shm_ino,omitempty"`
}

// SegmentDesc is the JSON document a segment publishes under
// mooncake/ram/<name>. The upstream fields come first; the shm fields are
// this implementation's and are ignored by upstream readers.
type SegmentDesc struct {
	Name            string       `json:"name"`
	Protocol        string       `json:"protocol"`
	TCPDataPort     int          `json:"tcp_data_port"`
	TCPProtoVersion int          `json:"tcp_proto_version"`
	Timestamp       string       `json:"timestamp"`
	Buffers         []BufferDesc `json:"buffers"`

	// HostID identifies the host and PID namespace; a peer with the same
	// HostID can map this segment's shm buffers.
	HostID string `json:"shm_host_id,omitempty"`
	PID    int    `json:"shm_pid,omitempty"`
	// CtlFD/CtlInode locate a small shared page holding the registry
	// version, so peers notice unregistration without asking.
	CtlFD    int    `json:"shm_ctl_fd,omitempty"`
	CtlInode uint64 `json:"shm_ctl_ino,omitempty"`
	// Version is the registry version this descriptor was taken at.
	Version uint64 `json:"shm_version,omitempty"`
}

// DecodeSegmentDesc parses and checks a descriptor document.
func DecodeSegmentDesc(b []byte) (*SegmentDesc, error) {
	var d SegmentDesc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, errcode.Errorf(errcode.MalformedJSON, err, "segment descriptor")
	}
	if d.Name == "" {
		return nil, errcode.Errorf(errcode.MalformedJSON, nil, "segment descriptor has no name")
	}
	// The document is another process's: every number used later as a
	// port, a process or a file descriptor is one a system call accepts.
	if d.TCPDataPort < 0 || d.TCPDataPort > 65535 {
		return nil, errcode.Errorf(errcode.MalformedJSON, nil, "tcp_data_port %d outside 0..65535", d.TCPDataPort)
	}
	if d.PID < 0 || d.CtlFD < 0 || d.PID > math.MaxInt32 || d.CtlFD > math.MaxInt32 {
		return nil, errcode.Errorf(errcode.MalformedJSON, nil, "shm_pid %d / shm_ctl_fd %d out of range", d.PID, d.CtlFD)
	}
	for _, b := range d.Buffers {
		if b.Addr+b.Length < b.Addr {
			return nil, errcode.Errorf(errcode.MalformedJSON, nil, "buffer %q wraps the address space", b.Name)
		}
		if b.ShmFD < 0 || b.ShmFD > math.MaxInt32 {
			return nil, errcode.Errorf(errcode.MalformedJSON, nil, "buffer %q: shm_fd %d out of range", b.Name, b.ShmFD)
		}
	}
	return &d, nil
}

// FindBuffer returns the index of the buffer holding [addr, addr+n), or -1.
func (d *SegmentDesc) FindBuffer(addr, n uint64) int {
	for i, b := range d.Buffers {
		if addr >= b.Addr && n <= b.Length && addr-b.Addr <= b.Length-n {
			return i
		}
	}
	return -1
}

func (b BufferDesc) String() string {
	return fmt.Sprintf("%s[%#x,+%d)", b.Name, b.Addr, b.Length)
}
