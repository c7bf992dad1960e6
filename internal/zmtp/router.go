package zmtp

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// ErrNoPeer is returned by Router.Send for an identity no connected peer
// has (it left, or never was).
var ErrNoPeer = errors.New("zmtp: no peer with that identity")

// RouterMsg is one message a ROUTER received: the sending peer's identity
// and the message's frames.
type RouterMsg struct {
	Identity string
	Frames   [][]byte
}

// Router is a bound ROUTER socket. Received messages are delivered on
// Incoming() (a peer whose message finds that queue full waits: the
// socket reads no more from it meanwhile). Send queues a reply to one
// peer, waiting up to the send timeout while that peer's queue is full;
// a peer that stays full is disconnected. Close disconnects every peer;
// replies still queued are dropped and Incoming is closed.
type Router struct {
	srv     server
	lim     Limits
	hwm     int
	timeout time.Duration
	in      chan RouterMsg
	stop    chan struct{}

	mu     sync.Mutex
	peers  map[string]*routerPeer
	nextID uint32
}

type routerPeer struct {
	p    *peerConn
	out  chan []byte
	quit chan struct{}
}

// NewRouter serves ROUTER on ln: messages up to lim from peers, hwm
// queued replies per peer, sendTimeout for a reply to find room. It takes
// ownership of ln.
func NewRouter(ln net.Listener, lim Limits, hwm int, sendTimeout time.Duration, log *slog.Logger) *Router {
	if log == nil {
		log = slog.Default()
	}
	r := &Router{lim: lim, hwm: max(hwm, 1), timeout: sendTimeout, in: make(chan RouterMsg, 64), stop: make(chan struct{}), peers: map[string]*routerPeer{}}
	r.srv = server{ln: ln, socketType: "ROUTER", accept: []string{"REQ", "DEALER", "ROUTER"}, log: log, serve: r.serve}
	r.srv.start()
	return r
}

// Addr is the bound address.
func (r *Router) Addr() net.Addr { return r.srv.ln.Addr() }

// Incoming delivers the peers' messages; it is closed by Close.
func (r *Router) Incoming() <-chan RouterMsg { return r.in }

// Send queues frames as one message to the peer with identity id.
func (r *Router) Send(id string, frames [][]byte) error {
	r.mu.Lock()
	p := r.peers[id]
	r.mu.Unlock()
	if p == nil {
		return ErrNoPeer
	}
	t := time.NewTimer(r.timeout)
	defer t.Stop()
	select {
	case p.out <- EncodeMessage(frames):
		return nil
	case <-p.quit:
		return ErrNoPeer
	case <-t.C:
		_ = p.p.c.Close()
		return ErrNoPeer
	}
}

// Close stops the socket; see Router.
func (r *Router) Close() error {
	r.mu.Lock()
	select {
	case <-r.stop:
		r.mu.Unlock()
		return nil
	default:
		close(r.stop)
	}
	r.mu.Unlock()
	err := r.srv.close()
	close(r.in)
	return err
}

// identity is the peer's Identity property, or a generated one (a zero
// byte and a 32-bit counter, as libzmq makes them).
func (r *Router) identity(pc *peerConn) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := pc.prop("Identity")
	if id == "" || id[0] == 0 {
		r.nextID++
		id = string(binary.BigEndian.AppendUint32([]byte{0}, r.nextID))
	}
	if _, taken := r.peers[id]; taken {
		return "", false
	}
	return id, true
}

func (r *Router) serve(pc *peerConn) {
	id, ok := r.identity(pc)
	if !ok {
		return // libzmq's default: a duplicate identity is refused
	}
	p := &routerPeer{p: pc, out: make(chan []byte, r.hwm), quit: make(chan struct{})}
	r.mu.Lock()
	r.peers[id] = p
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case b := <-p.out:
				if _, err := pc.c.Write(b); err != nil {
					_ = pc.c.Close()
					return
				}
			case <-p.quit:
				return
			}
		}
	}()
	defer func() {
		r.mu.Lock()
		delete(r.peers, id)
		r.mu.Unlock()
		close(p.quit)
		_ = pc.c.Close()
		<-done
	}()
	for {
		msg, cmd, err := readMessage(pc.r, r.lim)
		if err != nil {
			return
		}
		if cmd != nil {
			continue // PING and others: ignored
		}
		select {
		case r.in <- RouterMsg{Identity: id, Frames: msg}:
		case <-r.stop:
			return
		}
	}
}
