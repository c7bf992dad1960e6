package standalone

import (
	"log/slog"
	"sort"
	"sync"

	"github.com/mooncake-go/mooncake/internal/lifecycle"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// session is one dummy's connection and the regions it installed.
type session struct {
	srv  *Server
	conn *ipc.Conn
	life lifecycle.Gate // admits calls; closing waits for the running ones

	mu      sync.RWMutex // regions and scope; calls hold it shared while they use memory
	scope   *scope
	regions []*installed // sorted by base; changed with mu and mapMu both held

	// mapMu guards the mappings of the regions (revoke against release)
	// and the fields below. It is held only briefly, never while a call
	// runs, so the end of a connection can revoke at once whatever the
	// calls of the session are doing.
	mapMu   sync.Mutex
	revoked bool // no call may reach the dummy's memory any more (revoke.go)
	partial bool // a region could not be revoked: the socket is released after the calls
	hold    int  // the held socket (ipc.Conn.Hold), valid while held
	held    bool
	unheld  bool // the hold was released: no more is taken
}

// installed is a dummy region mapped into the daemon.
type installed struct {
	base, size uint64 // in the dummy's address space
	offset     uint64 // of base in the region's file
	m          *ipc.Region
}

func (r *installed) real() uintptr { return r.m.Addr() }

// handle answers one request of the dummy.
func (s *session) handle(msg ipc.Message) ipc.Message {
	req, err := decodeRequest(msg.Body)
	if err != nil {
		closeAll(msg.FDs)
		return reply(failed(kvstore.InvalidParams, "malformed request: %v", err))
	}
	if !s.life.Enter() {
		closeAll(msg.FDs)
		return reply(failed(kvstore.UnavailableInCurrentStatus, "mooncake_client is shutting down"))
	}
	defer s.life.Exit()
	s.srv.requests.Add(1)
	if req.Op == opRegister {
		return reply(s.register(req, msg.FDs))
	}
	closeAll(msg.FDs)
	if req.Op == opHello {
		return reply(s.hello(req, msg.Conn))
	}
	s.mu.RLock()
	ready := s.scope != nil
	s.mu.RUnlock()
	if !ready {
		return reply(failed(kvstore.InvalidParams, "%s before hello", req.Op))
	}
	if req.Op == opHotCache {
		return s.hotCache()
	}
	resp := s.dispatch(req)
	if resp.Code != 0 {
		s.srv.failures.Add(1)
	}
	return reply(resp)
}

func reply(r response) ipc.Message { return ipc.Message{Body: encode(r)} }

func (s *session) hello(req request, conn *ipc.Conn) response {
	if req.Keyspace != "" && req.Keyspace != s.srv.cfg.Keyspace {
		return failed(kvstore.InvalidParams, "keyspace %q: this mooncake_client serves keyspace %q (its --tenant_id)",
			req.Keyspace, s.srv.cfg.Keyspace)
	}
	if req.Scope == "" {
		return failed(kvstore.InvalidParams, "hello without a worker scope")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scope != nil {
		return failed(kvstore.InvalidParams, "hello twice on one connection")
	}
	// No call reaches the dummy's memory before hello: from here on the
	// dummy sees this connection end only once no call can (revoke.go).
	if err := s.holdSocket(conn); err != nil {
		return failed(kvstore.UnavailableInCurrentStatus, "the connection is ending: %v", err)
	}
	sc := s.srv.joinScope(req.Scope)
	s.scope = sc
	resp := response{}
	if sc.cache != nil {
		resp.Block = sc.cache.BlockSize()
	}
	return resp
}

// register maps the region the dummy passed and registers it with the
// Transfer Engine; re-registering the same base and size is a no-op.
func (s *session) register(req request, fds []int) response {
	if len(fds) != 1 {
		closeAll(fds)
		return failed(kvstore.InvalidParams, "register takes one descriptor, got %d", len(fds))
	}
	// The range must not wrap around the address space: the overlap test
	// below relies on it, as translate does.
	if req.Size == 0 || req.Base > ^uint64(0)-req.Size {
		closeAll(fds)
		return failed(kvstore.InvalidParams, "region [%#x,+%d) wraps around the address space", req.Base, req.Size)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.regions {
		if r.base == req.Base && r.size == req.Size {
			closeAll(fds)
			return response{}
		}
		if overlaps(req.Base, req.Size, r.base, r.size) {
			closeAll(fds)
			return failed(kvstore.InvalidParams, "region [%#x,+%d) overlaps a registered one", req.Base, req.Size)
		}
	}
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	if s.revoked {
		closeAll(fds)
		return failed(kvstore.UnavailableInCurrentStatus, "the connection is ending")
	}
	m, err := ipc.MapFD(fds[0], req.Offset, req.Size, true)
	if err != nil {
		closeAll(fds)
		return failed(kvstore.InvalidParams, "map region: %v", err)
	}
	if err := s.srv.cfg.Client.Engine().RegisterLocalOnly(m.Addr(), req.Size); err != nil {
		m.Close()
		return failed(kvstore.InvalidParams, "register region with the transfer engine: %v", err)
	}
	r := &installed{base: req.Base, size: req.Size, offset: req.Offset, m: m}
	i := sort.Search(len(s.regions), func(i int) bool { return s.regions[i].base > r.base })
	s.regions = append(s.regions[:i], append([]*installed{r}, s.regions[i:]...)...)
	return response{}
}

// overlaps reports whether [a, a+n) and [b, b+m) share a byte, for
// non-empty ranges, without computing an end (which may not fit 64 bits).
func overlaps(a, n, b, m uint64) bool {
	if a >= b {
		return a-b < m
	}
	return b-a < n
}

func (s *session) unregister(base uint64) response {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	for i, r := range s.regions {
		if r.base == base {
			s.release(r)
			s.regions = append(s.regions[:i], s.regions[i+1:]...)
			return response{}
		}
	}
	return failed(kvstore.InternalError, "no region registered at %#x", base)
}

// release unmaps one region; the caller holds mu exclusively, so no call
// uses it, and mapMu, so no revoke maps over it.
func (s *session) release(r *installed) {
	s.srv.cfg.Client.Engine().UnregisterLocalMemory(r.real())
	r.m.Close()
}

// translate maps dummy memory to the daemon's mapping of it; ok=false when
// a span lies outside every region of this dummy. The caller holds mu
// shared for as long as it uses the result.
func (s *session) translate(spans []span) ([]client.Part, bool) {
	parts := make([]client.Part, len(spans))
	for i, sp := range spans {
		if sp.Size == 0 {
			continue
		}
		j := sort.Search(len(s.regions), func(j int) bool { return s.regions[j].base > sp.Addr }) - 1
		if j < 0 {
			return nil, false
		}
		r := s.regions[j]
		if sp.Addr-r.base > r.size || sp.Size > r.size-(sp.Addr-r.base) {
			return nil, false
		}
		parts[i] = client.Part{Addr: r.real() + uintptr(sp.Addr-r.base), Size: sp.Size}
	}
	return parts, true
}

// drain ends a session whose dummy is still connected (the daemon shuts
// down): it stops admitting calls, waits for the running ones (their
// replies still reach the dummy) and releases the regions, then ends the
// connection (the dummy sees the daemon gone).
func (s *session) drain() {
	s.life.Close(nil, s.releaseRegions)
	if s.conn != nil {
		s.conn.Close()
	}
}

// close ends the session once its connection has ended (the dummy closed
// it, gave up on a call, or died): it revokes the dummy's memory at once,
// so no call still running can write it, releases the socket (the dummy
// waits for that to learn it), stops admitting calls and releases the
// regions once no call runs any more. Safe to call twice and
// concurrently.
func (s *session) close() {
	s.revoke()
	s.mapMu.Lock()
	partial := s.partial
	s.mapMu.Unlock()
	if !partial {
		s.unhold()
	}
	s.life.Close(nil, s.releaseRegions)
}

func (s *session) releaseRegions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scope != nil {
		s.srv.leaveScope(s.scope)
	}
	s.mapMu.Lock()
	for _, r := range s.regions {
		s.release(r)
	}
	if n := len(s.regions); n > 0 {
		slog.Info("mooncake_client: a dummy client left; its regions are released", "regions", n)
	}
	s.regions = nil
	s.revoked = true // nothing is mapped any more, and nothing will be
	s.mapMu.Unlock()
	s.unhold()
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			ipc.CloseFD(fd)
		}
	}
}
