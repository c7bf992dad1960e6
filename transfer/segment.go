package transfer

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/transfer/handshake"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// remoteSegment is a peer segment this engine has opened: its cached
// descriptor, where to reach it, and a connection per transport that
// reaches it.
type remoteSegment struct {
	e      *Engine
	name   string
	handle SegmentHandle
	// refs counts the open references (Segment values, and the engine's
	// own for TransferSync and the C API); cached: the engine holds one.
	// Both guarded by e.segMu. The last reference released forgets the
	// segment.
	refs   int
	cached bool

	mu      sync.Mutex
	desc    *SegmentDesc // nil until fetched or after a failure
	rpcAddr string
	// conns[i] is the connection over e.transports[i], nil where that
	// transport does not reach the peer.
	conns []transport.Conn
	// stale asks the next use to fetch the descriptor again. It is atomic
	// so transports can set it without taking mu.
	stale atomic.Bool
}

// Segment is one owned reference to a remote segment, as OpenSegment hands
// it out. References to the same name share one handle and one cached
// state (descriptor, connections, shared-memory mapping); the state lives
// until the last reference is closed, so an owner closing its reference
// never disturbs another owner of the same segment.
type Segment struct {
	s      *remoteSegment
	closed atomic.Bool
}

// Handle names the segment in requests (Request.Target) and in the
// engine's per-segment calls. It stays valid until every reference to the
// segment is closed.
func (r *Segment) Handle() SegmentHandle { return r.s.handle }

// Name is the segment's name.
func (r *Segment) Name() string { return r.s.name }

// Close releases this reference; the segment's cached state is dropped
// with the last one. Closing a reference twice is an error and changes
// nothing.
func (r *Segment) Close() error {
	if r.closed.Swap(true) {
		return errorf(CodeInvalidArgument, nil, "segment %q: reference already closed", r.s.name)
	}
	r.s.e.releaseSegment(r.s)
	return nil
}

// OpenSegment returns a new reference to the segment called name,
// fetching and caching its descriptor if no reference is open. The caller
// owns the reference and closes it when done.
func (e *Engine) OpenSegment(name string) (*Segment, error) {
	if err := e.refuseClosed("open segment " + name); err != nil {
		return nil, err
	}
	s, err := e.acquire(name, false)
	if err != nil {
		return nil, err
	}
	if _, err := s.current(); err != nil {
		e.releaseSegment(s)
		return nil, err
	}
	return &Segment{s: s}, nil
}

// CachedSegment returns the handle of the segment called name as the
// engine itself holds it: opened on first use and kept until the engine
// closes (TransferSync and the C API's transfers, whose callers own no
// reference, use it).
func (e *Engine) CachedSegment(name string) (SegmentHandle, error) {
	if err := e.refuseClosed("open segment " + name); err != nil {
		return 0, err
	}
	s, err := e.openSegment(name)
	if err != nil {
		return 0, err
	}
	return s.handle, nil
}

// openSegment is CachedSegment's segment (the engine's own reference).
func (e *Engine) openSegment(name string) (*remoteSegment, error) {
	s, err := e.acquire(name, true)
	if err != nil {
		return nil, err
	}
	if _, err := s.current(); err != nil {
		return nil, err
	}
	return s, nil
}

// acquire takes a reference to the segment called name (cached: the
// engine's own, taken once), creating its entry if there is none.
func (e *Engine) acquire(name string, cached bool) (*remoteSegment, error) {
	if name == "" {
		return nil, errorf(CodeInvalidArgument, nil, "empty segment name")
	}
	e.segMu.Lock()
	defer e.segMu.Unlock()
	s, ok := e.segs[name]
	if !ok {
		e.nextSeg++
		s = &remoteSegment{e: e, name: name, handle: e.nextSeg}
		e.segs[name], e.segByID[s.handle] = s, s
	}
	if !cached || !s.cached {
		s.refs++
		s.cached = s.cached || cached
	}
	return s, nil
}

// releaseSegment drops a reference to s; the last one forgets the segment.
func (e *Engine) releaseSegment(s *remoteSegment) {
	e.segMu.Lock()
	s.refs--
	last := s.refs == 0 && e.segByID[s.handle] == s
	if last {
		delete(e.segByID, s.handle)
		delete(e.segs, s.name)
	}
	e.segMu.Unlock()
	if last {
		s.close()
	}
}

func (e *Engine) segment(h SegmentHandle) (*remoteSegment, error) {
	e.segMu.Lock()
	defer e.segMu.Unlock()
	if s, ok := e.segByID[h]; ok {
		return s, nil
	}
	return nil, errorf(CodeInvalidArgument, nil, "unknown segment handle %d", h)
}

// SegmentDescriptor returns the cached descriptor of an open segment.
func (e *Engine) SegmentDescriptor(h SegmentHandle) (*SegmentDesc, error) {
	s, err := e.segment(h)
	if err != nil {
		return nil, err
	}
	return s.current()
}

// current returns the cached descriptor, fetching it when there is none.
func (s *remoteSegment) current() (*SegmentDesc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.desc != nil && !s.stale.Load() {
		return s.desc, nil
	}
	return s.refreshLocked()
}

// invalidate drops the cached descriptor so the next use fetches it again
// (after a failure: the peer may have restarted elsewhere).
func (s *remoteSegment) invalidate() { s.stale.Store(true) }

func (s *remoteSegment) refreshLocked() (_ *SegmentDesc, err error) {
	s.stale.Store(false)
	defer func() {
		if err != nil {
			s.stale.Store(true)
		}
	}()
	loc, raw, err := s.e.dir.Lookup(s.name)
	if err != nil {
		return nil, err
	}
	d, err := transport.DecodeSegmentDesc(raw)
	if err != nil {
		return nil, err
	}
	s.rpcAddr = loc.RPCAddr
	s.connect(transport.Peer{Name: s.name, Host: loc.Host, Desc: d, Invalidate: s.invalidate})
	s.desc = d
	return d, nil
}

// connect brings the segment's connections in line with the peer's new
// descriptor: a connection that can follow it stays, one that cannot is
// closed, and every transport that reaches the peer without a connection
// connects (a failure to connect leaves that transport out until the next
// descriptor).
func (s *remoteSegment) connect(p transport.Peer) {
	if s.conns == nil {
		s.conns = make([]transport.Conn, len(s.e.transports))
	}
	for i, t := range s.e.transports {
		c := s.conns[i]
		reaches := t.Reaches(p)
		if c != nil && (!reaches || !c.Update(p)) {
			c.Close()
			c = nil
		}
		if c == nil && reaches {
			var err error
			if c, err = t.Connect(p); err != nil {
				slog.Debug("transfer: transport cannot connect", "transport", t.Name(), "segment", s.name, "err", err)
				c = nil
			}
		}
		s.conns[i] = c
	}
}

// routeConn is a connection usable now and the index of its transport in
// the engine's list.
type routeConn struct {
	conn transport.Conn
	via  int
}

// route returns the descriptor and the connections usable now, in the
// engine's order of transports. A connection that finds the peer gone
// fails the route; one whose peer's registrations changed makes it fetch
// the descriptor again, and is left out while it stays stale (the target
// then validates the request over another transport). The connections are
// appended to buf[:0] (a caller's array saves the allocation).
func (s *remoteSegment) route(buf []routeConn) (*SegmentDesc, []routeConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.desc == nil || s.stale.Load() {
		if _, err := s.refreshLocked(); err != nil {
			return nil, nil, err
		}
	}
	usable := buf[:0]
	refreshed := false
	for i := 0; i < len(s.conns); i++ {
		c := s.conns[i]
		if c == nil {
			continue
		}
		stale, err := c.Check()
		if err != nil {
			s.invalidate()
			return nil, nil, errorf(CodeSocket, nil, "segment %q: %v", s.name, err)
		}
		if stale && !refreshed {
			refreshed = true
			if _, err := s.refreshLocked(); err != nil {
				return nil, nil, err
			}
			usable, i = usable[:0], -1 // the connections may have changed
			continue
		}
		if !stale {
			usable = append(usable, routeConn{c, i})
		}
	}
	if len(usable) == 0 {
		return nil, nil, errorf(CodeSocket, nil, "segment %q: no transport reaches it", s.name)
	}
	return s.desc, usable, nil
}

// peerGone reports whether a connection knows the peer's process is gone.
func (s *remoteSegment) peerGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if c != nil {
			if _, err := c.Check(); err != nil {
				return true
			}
		}
	}
	return false
}

// call sends one handshake frame to the segment's RPC port.
func (s *remoteSegment) call(typ byte, payload []byte) ([]byte, error) {
	if _, err := s.current(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	addr := s.rpcAddr
	s.mu.Unlock()
	reply, err := handshake.Call(addr, typ, payload, s.e.handshakeTimeout(), s.e.handshakeMax)
	if err != nil {
		s.invalidate()
	}
	return reply, err
}

func (s *remoteSegment) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if c != nil {
			c.Close()
		}
	}
	s.conns = nil
	s.desc = nil
}
