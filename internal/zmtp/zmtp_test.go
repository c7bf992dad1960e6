package zmtp

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// dialPeer connects to ln as a minimal ZMTP 3.0 client of socketType and
// returns the connection after the handshake.
func dialPeer(t *testing.T, addr net.Addr, socketType, identity string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial(addr.Network(), addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	g := greeting()
	g[32] = 0
	if _, err := c.Write(g); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	peer := make([]byte, greetingLen)
	if _, err := io.ReadFull(r, peer); err != nil {
		t.Fatal(err)
	}
	if err := checkGreeting(peer); err != nil {
		t.Fatal(err)
	}
	props := map[string]string{"Socket-Type": socketType, "Identity": identity}
	if _, err := c.Write(readyCommand(props, "Socket-Type", "Identity")); err != nil {
		t.Fatal(err)
	}
	f, err := readFrame(r, 4096)
	if err != nil || !f.command {
		t.Fatalf("READY: %v %+v", err, f)
	}
	return c, r
}

func TestPubFansOutToSubscribersOfTheTopicAndDropsForAFullQueue(t *testing.T) {
	ln, err := Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPub(ln, 2, nil)
	defer p.Close()
	all, allR := dialPeer(t, p.Addr(), "SUB", "")
	other, _ := dialPeer(t, p.Addr(), "SUB", "")
	if _, err := all.Write(EncodeMessage([][]byte{{1}})); err != nil { // subscribe to everything
		t.Fatal(err)
	}
	if _, err := other.Write(EncodeMessage([][]byte{append([]byte{1}, "x"...)})); err != nil {
		t.Fatal(err)
	}
	for p.Stats().Subscribers < 2 || p.Stats().Delivered == 0 {
		p.Send([][]byte{{}, []byte("probe")})
		time.Sleep(10 * time.Millisecond)
	}
	// Drain the probes, then check a real message arrives whole.
	p.Send([][]byte{{}, []byte("last"), bytes.Repeat([]byte("z"), 300)})
	for {
		msg, cmd, err := readMessage(allR, Limits{MaxFrame: 1 << 20, MaxFrames: 8})
		if err != nil || cmd != nil {
			t.Fatal(err, cmd)
		}
		if string(msg[1]) == "last" {
			if len(msg) != 3 || len(msg[2]) != 300 {
				t.Fatalf("message %q", msg)
			}
			break
		}
	}
	if p.Stats().Dropped == 0 {
		// "other" subscribed to topic "x" only and got nothing; "all"
		// kept up. Fill "all"'s queue without reading it: with hwm 2
		// some of these must be dropped.
		for range 100000 {
			p.Send([][]byte{{}, bytes.Repeat([]byte("y"), 1024)})
			if p.Stats().Dropped > 0 {
				break
			}
		}
	}
	if p.Stats().Dropped == 0 {
		t.Fatal("a subscriber that does not read lost nothing with hwm 2")
	}
}

func TestAStalledSubscriberDelaysNoOther(t *testing.T) {
	ln, err := Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPub(ln, 32, nil)
	defer p.Close()
	stalled, _ := dialPeer(t, p.Addr(), "SUB", "") // subscribes, then never reads
	live, liveR := dialPeer(t, p.Addr(), "SUB", "")
	for _, c := range []net.Conn{stalled, live} {
		if _, err := c.Write(EncodeMessage([][]byte{{1}})); err != nil {
			t.Fatal(err)
		}
	}
	lim := Limits{MaxFrame: 1 << 20, MaxFrames: 4}
	for p.Stats().Delivered < 2 { // both subscriptions are in
		p.Send([][]byte{{}, []byte("probe")})
		time.Sleep(10 * time.Millisecond)
	}
	// 64 MiB through a subscriber that reads nothing: far past its socket
	// buffers and queue. The live one must get every message anyway.
	big := bytes.Repeat([]byte("b"), 256<<10)
	got := make(chan int)
	go func() {
		n := 0
		for {
			msg, _, err := readMessage(liveR, lim)
			if err != nil {
				close(got)
				return
			}
			if len(msg) == 2 && len(msg[1]) == len(big) {
				n++
				if n == 256 {
					got <- n
					return
				}
			}
		}
	}()
	for range 256 {
		p.Send([][]byte{{}, big})
		time.Sleep(time.Millisecond) // the live reader keeps up; its queue holds 32 (8 MiB)
	}
	select {
	case n, ok := <-got:
		if !ok || n != 256 {
			t.Fatalf("the live subscriber got %d of 256", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the live subscriber was held up by the stalled one")
	}
	if p.Stats().Dropped == 0 {
		t.Fatal("the stalled subscriber lost nothing")
	}
}

func TestRouterDeliversByIdentityAndRepliesToTheSender(t *testing.T) {
	ln, err := Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := NewRouter(ln, Limits{MaxFrame: 64, MaxFrames: 4}, 8, time.Second, nil)
	defer r.Close()
	c, cr := dialPeer(t, r.Addr(), "DEALER", "me")
	if _, err := c.Write(EncodeMessage([][]byte{{}, []byte("hello")})); err != nil {
		t.Fatal(err)
	}
	m := <-r.Incoming()
	if m.Identity != "me" || len(m.Frames) != 2 || string(m.Frames[1]) != "hello" {
		t.Fatalf("got %+v", m)
	}
	if err := r.Send("me", [][]byte{{}, []byte("world")}); err != nil {
		t.Fatal(err)
	}
	msg, _, err := readMessage(cr, Limits{MaxFrame: 64, MaxFrames: 4})
	if err != nil || string(msg[1]) != "world" {
		t.Fatalf("reply %q %v", msg, err)
	}
	if err := r.Send("nobody", [][]byte{{}}); err != ErrNoPeer {
		t.Fatalf("send to an unknown identity: %v", err)
	}
	// A frame over the limit disconnects the peer.
	if _, err := c.Write(EncodeMessage([][]byte{bytes.Repeat([]byte("a"), 65)})); err != nil {
		t.Fatal(err)
	}
	if _, err := cr.ReadByte(); err == nil {
		t.Fatal("the router kept a peer that sent an oversized frame")
	}
}

func TestHandshakeRefusesTheWrongSocketTypeAndMechanism(t *testing.T) {
	ln, err := Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPub(ln, 1, nil)
	defer p.Close()
	c, r := dialPeer(t, p.Addr(), "PUSH", "")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, err := r.ReadByte(); err != nil {
			break // the PUB closed the connection after its ERROR
		}
	}
	g := greeting()
	copy(g[12:32], "CURVE")
	if err := checkGreeting(g); err == nil {
		t.Fatal("CURVE accepted")
	}
}

func TestIPCEndpoint(t *testing.T) {
	path := t.TempDir() + "/events.sock"
	ln, err := Listen("ipc://" + path)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPub(ln, 4, nil)
	if got := Endpoint(p.Addr()); got != "ipc://"+path {
		t.Fatalf("endpoint %q", got)
	}
	dialPeer(t, p.Addr(), "SUB", "")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestListenRejectsBadEndpoints(t *testing.T) {
	for _, ep := range []string{"", "tcp://", "tcp://127.0.0.1", "udp://1.2.3.4:5", "127.0.0.1:5557", "tcp://256.1.1.1:5"} {
		if ln, err := Listen(ep); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) accepted", ep)
		}
	}
}

// FuzzReadMessage feeds arbitrary bytes to the frame reader a peer's
// input goes through: it returns a message within the limits, a command,
// or an error, and never panics.
func FuzzReadMessage(f *testing.F) {
	f.Add(EncodeMessage([][]byte{{1}, []byte("topic")}))
	f.Add(encodeCommand("SUBSCRIBE", []byte("x")))
	f.Add(readyCommand(map[string]string{"Socket-Type": "SUB"}, "Socket-Type"))
	f.Add([]byte{flagLong, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{flagCommand, 3, 10, 'a', 'b'})
	lim := Limits{MaxFrame: 256, MaxFrames: 4}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for range 16 {
			msg, cmd, err := readMessage(r, lim)
			if err != nil {
				return
			}
			if cmd != nil {
				if cmd.name == "READY" {
					_, _ = parseProperties(cmd.data)
				}
				continue
			}
			if len(msg) == 0 || len(msg) > lim.MaxFrames {
				t.Fatalf("%d frames", len(msg))
			}
			for _, fr := range msg {
				if len(fr) > lim.MaxFrame {
					t.Fatalf("frame of %d bytes", len(fr))
				}
			}
		}
	})
}
