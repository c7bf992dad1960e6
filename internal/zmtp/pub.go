package zmtp

import (
	"bytes"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
)

// subLimits bounds what a subscriber may send: subscriptions (a flag
// byte and a topic prefix) and nothing else of size.
var subLimits = Limits{MaxFrame: 1024, MaxFrames: 4}

// maxSubscriptions is the most topic prefixes one subscriber may hold.
const maxSubscriptions = 256

// Pub is a bound PUB socket. Send never blocks: each subscriber has a
// queue of hwm messages, and a message for a subscriber whose queue is
// full is dropped for that subscriber only (counted in Stats). Close
// stops accepting, disconnects every subscriber and drops what their
// queues still hold.
type Pub struct {
	srv   server
	hwm   int
	mu    sync.Mutex
	peers map[*subscriber]struct{}
	drops atomic.Uint64
	sent  atomic.Uint64
}

// subscriber is one connected SUB peer.
type subscriber struct {
	p    *peerConn
	out  chan []byte
	mu   sync.Mutex
	subs [][]byte
}

// PubStats are a Pub's counters.
type PubStats struct {
	Subscribers int
	// Delivered counts messages queued to a subscriber; Dropped those
	// dropped because that subscriber's queue was full.
	Delivered, Dropped uint64
}

// NewPub serves PUB on ln with a per-subscriber queue of hwm messages
// (at least 1). It takes ownership of ln.
func NewPub(ln net.Listener, hwm int, log *slog.Logger) *Pub {
	if log == nil {
		log = slog.Default()
	}
	p := &Pub{hwm: max(hwm, 1), peers: map[*subscriber]struct{}{}}
	p.srv = server{ln: ln, socketType: "PUB", accept: []string{"SUB", "XSUB"}, log: log, serve: p.serve}
	p.srv.start()
	return p
}

// Addr is the bound address.
func (p *Pub) Addr() net.Addr { return p.srv.ln.Addr() }

// Send queues the message to every subscriber whose subscription prefixes
// frames[0]; frames must not be changed afterwards.
func (p *Pub) Send(frames [][]byte) {
	var wire []byte
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.peers {
		if !s.wants(frames[0]) {
			continue
		}
		if wire == nil {
			wire = EncodeMessage(frames)
		}
		select {
		case s.out <- wire:
			p.sent.Add(1)
		default:
			p.drops.Add(1)
		}
	}
}

// Stats returns the counters.
func (p *Pub) Stats() PubStats {
	p.mu.Lock()
	n := len(p.peers)
	p.mu.Unlock()
	return PubStats{Subscribers: n, Delivered: p.sent.Load(), Dropped: p.drops.Load()}
}

// Close stops the socket; see Pub.
func (p *Pub) Close() error { return p.srv.close() }

func (s *subscriber) wants(topic []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.subs {
		if bytes.HasPrefix(topic, t) {
			return true
		}
	}
	return false
}

// subscribe applies a subscription message or command.
func (s *subscriber) subscribe(on bool, topic []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range s.subs {
		if bytes.Equal(t, topic) {
			if !on {
				s.subs = append(s.subs[:i], s.subs[i+1:]...)
			}
			return true
		}
	}
	if !on {
		return true
	}
	if len(s.subs) == maxSubscriptions {
		return false
	}
	s.subs = append(s.subs, bytes.Clone(topic))
	return true
}

func (p *Pub) serve(pc *peerConn) {
	s := &subscriber{p: pc, out: make(chan []byte, p.hwm)}
	p.mu.Lock()
	p.peers[s] = struct{}{}
	p.mu.Unlock()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case b := <-s.out:
				if _, err := pc.c.Write(b); err != nil {
					_ = pc.c.Close()
					return
				}
			case <-quit:
				return
			}
		}
	}()
	defer func() {
		p.mu.Lock()
		delete(p.peers, s)
		p.mu.Unlock()
		close(quit)
		_ = pc.c.Close()
		<-done
	}()
	for {
		msg, cmd, err := readMessage(pc.r, subLimits)
		if err != nil {
			return
		}
		switch {
		case cmd != nil && (cmd.name == "SUBSCRIBE" || cmd.name == "CANCEL"): // ZMTP 3.1
			if !s.subscribe(cmd.name == "SUBSCRIBE", cmd.data) {
				return
			}
		case cmd != nil: // PING and others: ignored
		case len(msg) == 1 && len(msg[0]) > 0 && msg[0][0] <= 1: // ZMTP 3.0
			if !s.subscribe(msg[0][0] == 1, msg[0][1:]) {
				return
			}
		}
	}
}
