package ipc

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawPair connects a raw socket (the test plays a hostile peer on it) to
// a Conn serving handler.
func rawPair(t *testing.T, handler Handler) (raw int, server *Conn) {
	t.Helper()
	return rawPairLimited(t, handler, Limits{})
}

// rawPairLimited is rawPair with the server's Limits.
func rawPairLimited(t *testing.T, handler Handler, lim Limits) (raw int, server *Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[1]), "server")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if server, err = NewConnLimited(nc.(*net.UnixConn), handler, lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); unix.Close(fds[0]) })
	return fds[0], server
}

// sendRaw sends bytes with descriptors in one sendmsg, as any peer can. A
// server that has ended the connection already (EPIPE) is what the callers
// check for next.
func sendRaw(t *testing.T, sock int, b []byte, fds []int) {
	t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(sock, b, oob, nil, unix.MSG_NOSIGNAL); err != nil && err != unix.EPIPE && err != unix.ECONNRESET {
		t.Fatal(err)
	}
}

// header is a request header announcing nfds descriptors and n body bytes.
func header(id uint32, n, nfds int) []byte {
	h := make([]byte, headerSize)
	encodeHeader(h, &frame{id: id, kind: kindRequest, body: make([]byte, n), fds: make([]int, nfds)})
	return h
}

// memfds returns n descriptors of one memfd of size bytes; the test closes
// its copies when it ends.
func memfds(t *testing.T, n int, size int64) []int {
	t.Helper()
	fd, err := unix.MemfdCreate("ipc-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	out := []int{fd}
	for len(out) < n {
		d, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	t.Cleanup(func() { closeFDs(out) })
	return out
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// readReplies reads sock until the peer closes it or until max replies
// came, and returns their bodies and whether the peer closed.
func readReplies(t *testing.T, sock, max int) (bodies []string, closed bool) {
	t.Helper()
	if err := unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 20}); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 4096)
	for len(bodies) < max {
		n, err := unix.Read(sock, buf)
		if err == unix.EINTR {
			continue
		}
		if n == 0 || err == unix.ECONNRESET { // ECONNRESET: closed with bytes of ours unread
			return bodies, true
		}
		if err != nil {
			t.Fatalf("reading the server's end: %v (it neither replied nor closed)", err)
		}
		got = append(got, buf[:n]...)
		for len(got) >= headerSize {
			n, _, _, _, err := decodeHeader(got)
			if err != nil {
				t.Fatalf("garbled reply %q", got)
			}
			if len(got) < headerSize+n {
				break
			}
			bodies, got = append(bodies, string(got[headerSize:headerSize+n])), got[headerSize+n:]
		}
	}
	return bodies, false
}

// fdSizes answers with the sizes of the files it was given.
func fdSizes(req Message) Message {
	out := fmt.Sprint(len(req.FDs))
	for _, fd := range req.FDs {
		var st unix.Stat_t
		unix.Fstat(fd, &st)
		out += fmt.Sprintf(" %d", st.Size)
	}
	closeFDs(req.FDs)
	return Message{Body: []byte(out)}
}

func TestDescriptorsOtherThanAnnouncedEndTheConnection(t *testing.T) {
	cases := []struct {
		name string
		send func(t *testing.T, sock int)
	}{
		{"extra descriptors", func(t *testing.T, sock int) {
			sendRaw(t, sock, append(header(1, 1, 0), 'x'), memfds(t, 3, 0))
		}},
		{"more than announced", func(t *testing.T, sock int) {
			sendRaw(t, sock, append(header(1, 1, 1), 'x'), memfds(t, 2, 0))
		}},
		{"fewer than announced", func(t *testing.T, sock int) {
			sendRaw(t, sock, append(header(1, 1, 2), 'x'), memfds(t, 1, 0))
		}},
		{"announced, none sent", func(t *testing.T, sock int) {
			sendRaw(t, sock, append(header(1, 1, 1), 'x'), nil)
		}},
		{"sent inside a frame that announces none", func(t *testing.T, sock int) {
			sendRaw(t, sock, header(1, 2, 0), nil)
			sendRaw(t, sock, []byte("x"), memfds(t, 1, 0))
			sendRaw(t, sock, []byte("y"), nil)
		}},
		{"more than a frame may carry", func(t *testing.T, sock int) {
			sendRaw(t, sock, append(header(1, 1, 0), 'x'), memfds(t, 3*maxFDs, 0))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := openFDs(t)
			sock, srv := rawPair(t, fdSizes)
			tc.send(t, sock)
			if got, _ := readReplies(t, sock, 1); len(got) > 0 {
				t.Fatalf("the server answered %q instead of ending the connection", got[0])
			}
			<-srv.Done()
			srv.Close()
			unix.Close(sock)
			// What the test still holds: its own copies of the memfds.
			if after := openFDs(t); after > before+3*maxFDs {
				t.Fatalf("%d descriptors open before, %d after: the server kept what it was sent", before, after)
			}
		})
	}
}

func TestStaleDescriptorIsNeverGivenToALaterFrame(t *testing.T) {
	sock, srv := rawPair(t, fdSizes)
	stale, right := memfds(t, 1, 0), memfds(t, 1, 4096)
	sendRaw(t, sock, append(header(1, 1, 0), 'x'), stale) // one descriptor no frame announced
	sendRaw(t, sock, append(header(2, 1, 1), 'y'), right)
	// Replies, if any come, name the sizes of what the server was given:
	// "1 0" is the stale memfd in place of the one sent.
	got, closed := readReplies(t, sock, 2)
	for _, body := range got {
		if body == "1 0" {
			t.Fatalf("the second frame was given the first frame's stray descriptor (replies %q)", got)
		}
	}
	if !closed {
		t.Fatalf("the connection was not ended (replies %q)", got)
	}
	<-srv.Done()
}

func TestExtraDescriptorsDoNotAccumulate(t *testing.T) {
	sent := memfds(t, maxFDs, 0)
	before := openFDs(t)
	sock, srv := rawPair(t, fdSizes)
	for i := range 500 {
		sendRaw(t, sock, append(header(uint32(i+1), 1, 0), 'x'), sent)
		buf := make([]byte, 64)
		unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 20})
		n, err := unix.Read(sock, buf)
		if err == unix.ECONNRESET {
			n, err = 0, nil
		}
		if err != nil {
			t.Fatalf("call %d: neither a reply nor the end of the connection: %v", i, err)
		}
		if n == 0 { // ended, as it should be: the peer connects again
			<-srv.Done()
			srv.Close()
			unix.Close(sock)
			sock, srv = rawPair(t, fdSizes)
		}
	}
	// The last connection is still open: whatever it kept is counted.
	deadline := time.Now().Add(20 * time.Second)
	for openFDs(t) > before+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := openFDs(t); after > before+2 {
		t.Fatalf("%d descriptors open before 500 calls with %d stray descriptors each, %d after", before, maxFDs, after)
	}
}
