package transfer

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/transfer/handshake"
	"github.com/mooncake-go/mooncake/transfer/metadata"
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

	// mu guards the fields below. It is never held across network I/O
	// or a transport's Connect: a fetch runs outside it (refresh), so a
	// peer or directory that does not answer delays only the callers that
	// need the new descriptor, never those using connections already open.
	mu      sync.Mutex
	desc    *SegmentDesc // nil until fetched or after a failure
	rpcAddr string
	// conns[i] is the connection over e.transports[i], nil where that
	// transport does not reach the peer.
	conns []transport.Conn
	// fetching is the descriptor fetch in flight, nil when none: every
	// caller that needs a fetch joins it (one per segment at a time).
	fetching *fetch
	closed   bool // close ran: a fetch that ends after it publishes nothing
	// stale asks the next use to fetch the descriptor again. It is atomic
	// so transports can set it without taking mu.
	stale atomic.Bool
}

// fetch is one descriptor fetch of a segment; done closes when desc and
// err are set.
type fetch struct {
	done chan struct{}
	desc *SegmentDesc
	err  error
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
	if s.desc != nil && !s.stale.Load() {
		d := s.desc
		s.mu.Unlock()
		return d, nil
	}
	s.mu.Unlock()
	return s.refresh()
}

// invalidate drops the cached descriptor so the next use fetches it again
// (after a failure: the peer may have restarted elsewhere).
func (s *remoteSegment) invalidate() { s.stale.Store(true) }

// refresh fetches the descriptor and brings the connections in line with
// it, or joins the fetch already in flight, and waits for it. It is
// called without mu.
func (s *remoteSegment) refresh() (*SegmentDesc, error) {
	s.mu.Lock()
	f := s.startFetchLocked()
	s.mu.Unlock()
	<-f.done
	return f.desc, f.err
}

// startFetchLocked returns the fetch in flight, starting one on its own
// goroutine if there is none. Called with mu held.
func (s *remoteSegment) startFetchLocked() *fetch {
	if s.fetching != nil {
		return s.fetching
	}
	f := &fetch{done: make(chan struct{})}
	s.fetching = f
	s.stale.Store(false)
	conns := append([]transport.Conn(nil), s.conns...)
	go s.runFetch(f, conns)
	return f
}

// runFetch is one fetch: the directory lookup and the transports' Update
// and Connect run without mu; the outcome is published under it. conns
// are the connections when the fetch started (only a fetch replaces
// them, and one runs at a time).
func (s *remoteSegment) runFetch(f *fetch, conns []transport.Conn) {
	var loc metadata.Location
	var d *SegmentDesc
	old := append([]transport.Conn(nil), conns...)
	loc, raw, err := s.e.dir.Lookup(s.name)
	if err == nil {
		d, err = transport.DecodeSegmentDesc(raw)
	}
	if err == nil {
		conns = s.connect(conns, transport.Peer{Name: s.name, Host: loc.Host, Desc: d, Invalidate: s.invalidate})
	}
	s.mu.Lock()
	s.fetching = nil
	switch {
	case s.closed:
		// The segment went away during the fetch: close already closed
		// the old connections; the new ones are closed here.
		for i, c := range conns {
			if c != nil && (i >= len(old) || c != old[i]) {
				c.Close()
			}
		}
		err = errorf(CodeInvalidArgument, nil, "segment %q: closed", s.name)
	case err != nil:
		s.stale.Store(true) // the next use tries again
	default:
		s.rpcAddr, s.conns, s.desc = loc.RPCAddr, conns, d
	}
	f.desc, f.err = d, err
	if err != nil {
		f.desc = nil
	}
	close(f.done)
	s.mu.Unlock()
}

// connect brings the segment's connections (conns, one slot per
// transport; nil before the first fetch) in line with the peer's new
// descriptor and returns them: a connection that can follow it stays, one
// that cannot is closed, and every transport that reaches the peer
// without a connection connects (a failure to connect leaves that
// transport out until the next descriptor). It runs without mu.
func (s *remoteSegment) connect(conns []transport.Conn, p transport.Peer) []transport.Conn {
	if conns == nil {
		conns = make([]transport.Conn, len(s.e.transports))
	}
	for i, t := range s.e.transports {
		c := conns[i]
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
		conns[i] = c
	}
	return conns
}

func closeAll(conns []transport.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// routeConn is a connection usable now and the index of its transport in
// the engine's list.
type routeConn struct {
	conn transport.Conn
	via  int
}

// route returns the descriptor and the connections usable now, in the
// engine's order of transports. Without a descriptor, or once the segment
// is invalidated (the peer may have moved), it waits for a fetch. A
// connection that finds the peer gone fails the route; one whose peer's
// registrations changed starts a fetch in the background and is left out
// while it stays stale (the target then validates the request over
// another transport); only when no connection is left does the route wait
// for that fetch. No lock is held while a fetch runs, so a peer or
// directory that does not answer never holds up the connections already
// open. The connections are appended to buf[:0] (a caller's array saves
// the allocation).
func (s *remoteSegment) route(buf []routeConn) (*SegmentDesc, []routeConn, error) {
	for waited := false; ; waited = true {
		s.mu.Lock()
		if s.desc == nil || s.stale.Load() {
			s.mu.Unlock()
			if _, err := s.refresh(); err != nil {
				return nil, nil, err
			}
			s.mu.Lock()
		}
		desc, usable, stale, err := s.usableLocked(buf[:0])
		if stale && !waited {
			f := s.startFetchLocked()
			s.mu.Unlock()
			if len(usable) > 0 {
				return desc, usable, nil
			}
			<-f.done
			if f.err != nil {
				return nil, nil, f.err
			}
			continue // the connections may have changed
		}
		s.mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
		if len(usable) == 0 {
			return nil, nil, errorf(CodeSocket, nil, "segment %q: no transport reaches it", s.name)
		}
		return desc, usable, nil
	}
}

// usableLocked checks the connections without blocking: the ones usable
// now (appended to usable), whether one is stale, and an error when one
// finds the peer gone (the segment is then invalidated). Called with mu
// held, after a fetch succeeded (desc is set).
func (s *remoteSegment) usableLocked(usable []routeConn) (*SegmentDesc, []routeConn, bool, error) {
	stale := false
	for i, c := range s.conns {
		if c == nil {
			continue
		}
		st, err := c.Check()
		if err != nil {
			s.invalidate()
			return nil, nil, false, errorf(CodeSocket, nil, "segment %q: %v", s.name, err)
		}
		if st {
			stale = true
			continue
		}
		usable = append(usable, routeConn{c, i})
	}
	return s.desc, usable, stale, nil
}

// mapped returns the connections usable now, from the descriptor held
// (none before the first fetch), without fetching it again even when it is
// stale.
func (s *remoteSegment) mapped(buf []routeConn) []routeConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.desc == nil {
		return nil
	}
	_, usable, _, err := s.usableLocked(buf)
	if err != nil {
		return nil
	}
	return usable
}

// peerGone reports whether a connection knows the peer's process is gone
// or exiting, looking now where the connection can (transport.ExitWatch)
// rather than trusting an earlier look.
func (s *remoteSegment) peerGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		if c == nil {
			continue
		}
		if x, ok := c.(transport.ExitWatch); ok {
			if x.Exited() {
				return true
			}
			continue
		}
		if _, err := c.Check(); err != nil {
			return true
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
	closeAll(s.conns)
	s.conns = nil
	s.desc = nil
	s.closed = true
}
