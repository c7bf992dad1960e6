package ipc

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// segment is one sendmsg of the fuzzed peer: bytes and how many
// descriptors (of one memfd of its own) ride with them.
type segment struct {
	data []byte
	nfds int
}

// segmentsOf cuts fuzz input into at most 32 sendmsg calls: per call a
// control byte (its descriptor count is the byte mod 20, so some exceed
// what a frame may carry) and a length byte, then that many bytes. A call
// with descriptors and no bytes carries one zero byte: on a stream socket
// that is what x/sys/unix's Sendmsg sends in its place, so it is part of
// the stream the reader sees.
func segmentsOf(in []byte) []segment {
	var out []segment
	for len(in) >= 2 && len(out) < 32 {
		nfds, n := int(in[0])%20, int(in[1])
		in = in[2:]
		n = min(n, len(in))
		data := in[:n]
		if n == 0 && nfds > 0 {
			data = []byte{0}
		}
		out = append(out, segment{data: data, nfds: nfds})
		in = in[n:]
	}
	return out
}

// frameSeed is one frame announcing announced descriptors, sent in one
// sendmsg with sent descriptors, as a segment of the fuzz input.
func frameSeed(id uint32, body string, announced, sent int) []byte {
	b := make([]byte, headerSize, headerSize+len(body))
	encodeHeader(b, &frame{id: id, kind: kindRequest, body: []byte(body), fds: make([]int, announced)})
	b = append(b, body...)
	return append([]byte{byte(sent), byte(len(b))}, b...)
}

// FuzzReader sends fuzzed bytes and descriptors through a socket pair to
// the frame reader and checks what it gives out: every frame's body is the
// stream's bytes, its descriptors are as many as its header announces and
// came with bytes of that frame (not an earlier or later one's), and once
// the reader stops, no descriptor it received is left open.
func FuzzReader(f *testing.F) {
	f.Add(frameSeed(1, "hello", 0, 0))
	f.Add(frameSeed(1, "register", 1, 1))
	f.Add(append(frameSeed(1, "a", 0, 0), frameSeed(2, "bb", 2, 2)...))
	f.Add(append(frameSeed(1, "stray", 0, 1), frameSeed(2, "next", 1, 1)...))
	f.Add(append(frameSeed(1, "one", 1, 1), frameSeed(2, "two", 1, 0)...))
	f.Add(frameSeed(1, "many", 0, 19))
	f.Add(frameSeed(1, "fewer", 3, 2))
	f.Add([]byte{0, 12, 3, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 3, 'x', 'y', 'z'}) // header, then body with the descriptor
	f.Fuzz(func(t *testing.T, in []byte) {
		segs := segmentsOf(in)
		var stream []byte
		var starts []int // stream offset of each segment
		for _, s := range segs {
			starts = append(starts, len(stream))
			stream = append(stream, s.data...)
		}
		inodes := map[uint64]int{} // memfd inode -> segment
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range segs {
			fds := segmentFDs(t, s.nfds, inodes, i)
			var oob []byte
			if len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			err := unix.Sendmsg(pair[0], s.data, oob, nil, unix.MSG_NOSIGNAL)
			closeFDs(fds)
			if err != nil {
				t.Fatalf("sendmsg: %v", err)
			}
		}
		unix.Close(pair[0]) // everything is queued: the reader sees the end after it
		file := os.NewFile(uintptr(pair[1]), "reader")
		nc, err := net.FileConn(file)
		file.Close()
		if err != nil {
			t.Fatal(err)
		}
		uc := nc.(*net.UnixConn)
		rc, err := uc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		r := newReader(rc)
		off := 0
		for {
			fr, err := r.next()
			if err != nil {
				if !errors.Is(err, errPeerClosed) && !errors.Is(err, ErrProtocol) {
					t.Fatalf("reader error %v, want the end of the stream or a protocol error", err)
				}
				break
			}
			end := off + headerSize + len(fr.body)
			if end > len(stream) || !bytes.Equal(fr.body, stream[off+headerSize:end]) || len(fr.fds) != int(stream[off+9]) {
				t.Fatalf("frame at %d: %d bytes, %d descriptors; not what the stream holds", off, len(fr.body), len(fr.fds))
			}
			for _, fd := range fr.fds {
				var st unix.Stat_t
				if err := unix.Fstat(fd, &st); err != nil {
					t.Fatalf("frame at %d was given a closed descriptor: %v", off, err)
				}
				seg, ok := inodes[st.Ino]
				if !ok {
					t.Fatalf("frame at %d was given a descriptor the peer never sent", off)
				}
				if segEnd := starts[seg] + len(segs[seg].data); starts[seg] >= end || segEnd <= off {
					t.Fatalf("frame [%d,%d) was given a descriptor sent with bytes [%d,%d)", off, end, starts[seg], segEnd)
				}
			}
			closeFDs(fr.fds)
			off = end
		}
		r.closePending()
		uc.Close()
		if left := memfdsOf(t, inodes); len(left) > 0 {
			t.Fatalf("descriptors %v of this input's memfds are open after the reader stopped", left)
		}
	})
}

// memfdsOf lists this process's open descriptors of the memfds whose
// inodes are keys of inodes. It looks at those memfds only: a count of
// every open descriptor also moves when the fuzzing worker opens or
// closes its own files meanwhile (CI saw 26 before, 22 after).
func memfdsOf(t *testing.T, inodes map[uint64]int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var open []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(target, "/memfd:fuzz") {
			continue // closed meanwhile, or not one of ours
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			if _, ours := inodes[st.Ino]; ours {
				open = append(open, fd)
			}
		}
	}
	return open
}

// segmentFDs makes n descriptors of one new memfd and notes its inode as
// segment seg's.
func segmentFDs(t *testing.T, n int, inodes map[uint64]int, seg int) []int {
	if n == 0 {
		return nil
	}
	fd, err := unix.MemfdCreate("fuzz", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	inodes[st.Ino] = seg
	fds := []int{fd}
	for len(fds) < n {
		d, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, d)
	}
	return fds
}
