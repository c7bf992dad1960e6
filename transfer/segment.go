package transfer

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// remoteSegment is a peer segment this engine has opened: its cached
// descriptor, where to reach it, and its transports.
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

	mu       sync.Mutex
	desc     *SegmentDesc // nil until fetched or after a failure
	rpcAddr  string
	dataAddr string
	tcp      *tcpPeer
	shm      *peerShm // nil when the peer is not reachable through shm
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
	e := s.e
	s.stale.Store(false)
	defer func() {
		if err != nil {
			s.stale.Store(true)
		}
	}()
	var raw []byte
	var host string
	if e.p2p {
		host, _, err = net.SplitHostPort(s.name)
		if err != nil {
			return nil, errorf(CodeInvalidArgument, err, "P2P segment name %q is not host:port", s.name)
		}
		s.rpcAddr = s.name
		raw, err = handshakeCall(s.name, frameMetadata, []byte("{}"), e.handshakeTimeout(), handshakeMaxLength())
		if err != nil {
			return nil, err
		}
	} else {
		var rpc RPCMeta
		if err := e.metaGetJSON(e.keys.rpcMeta(s.name), &rpc); err != nil {
			return nil, err
		}
		host = rpc.Host
		s.rpcAddr = net.JoinHostPort(rpc.Host, strconv.Itoa(rpc.RPCPort))
		if raw, err = e.metaGet(e.keys.segment(s.name)); err != nil {
			return nil, err
		}
	}
	d, err := decodeSegmentDesc(raw)
	if err != nil {
		return nil, err
	}
	dataAddr := net.JoinHostPort(host, strconv.Itoa(d.TCPDataPort))
	if s.tcp != nil && s.dataAddr != dataAddr {
		s.tcp.close()
		s.tcp = nil
	}
	s.dataAddr = dataAddr
	s.updateShm(d)
	s.desc = d
	return d, nil
}

// updateShm (re)attaches the peer's shared memory for descriptor d.
func (s *remoteSegment) updateShm(d *SegmentDesc) {
	if s.e.ctl == nil {
		return // shm disabled here
	}
	if s.shm != nil && (s.desc == nil || s.desc.PID != d.PID || s.desc.CtlInode != d.CtlInode) {
		s.shm.close()
		s.shm = nil
	}
	if s.shm == nil {
		if p, err := openPeerShm(d); err == nil {
			s.shm = p
		}
		return
	}
	keep := map[uint64]bool{}
	for _, b := range d.Buffers {
		keep[b.ShmInode] = true
	}
	s.shm.forget(keep)
}

// route decides how to reach the segment now: the descriptor, the shm
// attachment if usable (nil otherwise), and the TCP peer.
func (s *remoteSegment) route() (*SegmentDesc, *peerShm, *tcpPeer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.desc == nil || s.stale.Load() {
		if _, err := s.refreshLocked(); err != nil {
			return nil, nil, nil, err
		}
	}
	if s.shm != nil {
		if !s.shm.aliveRecently() {
			s.invalidate()
			return nil, nil, nil, errorf(CodeSocket, nil, "segment %q: peer process exited", s.name)
		}
		if s.shm.version() != s.desc.Version {
			if _, err := s.refreshLocked(); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	if s.tcp == nil {
		s.tcp = newTCPPeer(s.dataAddr, s.e.cfg.LanesPerPeer, s.e.mem, s.invalidate)
	}
	shm := s.shm
	if shm != nil && shm.version() != s.desc.Version {
		shm = nil // still changing: let the target validate over TCP
	}
	return s.desc, shm, s.tcp, nil
}

// call sends one handshake frame to the segment's RPC port.
func (s *remoteSegment) call(typ byte, payload []byte) ([]byte, error) {
	if _, err := s.current(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	addr := s.rpcAddr
	s.mu.Unlock()
	reply, err := handshakeCall(addr, typ, payload, s.e.handshakeTimeout(), handshakeMaxLength())
	if err != nil {
		s.invalidate()
	}
	return reply, err
}

func (s *remoteSegment) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tcp != nil {
		s.tcp.close()
		s.tcp = nil
	}
	if s.shm != nil {
		s.shm.close()
		s.shm = nil
	}
	s.desc = nil
}

func (e *Engine) metaGet(key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := e.meta.Get(ctx, key)
	if errors.Is(err, ErrMetadataNotFound) {
		return nil, errorf(CodeMetadata, err, "segment not published (%s)", key)
	}
	if err != nil {
		return nil, errorf(CodeMetadata, err, "read %s", key)
	}
	return b, nil
}

func (e *Engine) metaGetJSON(key string, v any) error {
	b, err := e.metaGet(key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errorf(CodeMalformedJSON, err, "%s", key)
	}
	return nil
}
