package standalone

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// ServerConfig is what the daemon serves with.
type ServerConfig struct {
	// Client is the real client the dummies' calls run on. The Server
	// does not close it.
	Client *client.Client
	// Socket is the abstract Unix socket to listen on (ipc.SocketName).
	Socket string
	// Keyspace names the namespace the real client works in (its tenant);
	// a dummy that asks for another one is refused.
	Keyspace string
	// HotCache, when its Size is positive, gives every worker scope a hot
	// cache of this shape (Size bytes each).
	HotCache hotcache.Config
}

// Server serves dummy clients. Close ends it.
type Server struct {
	cfg ServerConfig
	ln  *net.UnixListener

	mu       sync.Mutex
	closing  bool
	sessions map[*session]struct{}
	scopes   map[string]*scope

	requests, failures atomic.Uint64
	wg                 sync.WaitGroup
}

// NewServer listens on cfg.Socket and starts accepting dummies.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("standalone: a server needs a client")
	}
	ln, err := ipc.Listen(cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Socket, err)
	}
	s := &Server{cfg: cfg, ln: ln, sessions: map[*session]struct{}{}, scopes: map[string]*scope{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		uc, err := s.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		sess := &session{srv: s}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			uc.Close()
			return
		}
		s.sessions[sess] = struct{}{}
		s.mu.Unlock()
		conn, err := ipc.NewConn(uc, sess.handle)
		if err != nil {
			uc.Close()
			s.forget(sess)
			continue
		}
		sess.conn = conn
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			<-conn.Done()
			sess.close()
			s.forget(sess)
		}()
	}
}

func (s *Server) forget(sess *session) {
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
}

// Sessions is how many dummies are connected.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Close shuts the server down: no new dummy connects; every session stops
// admitting calls (those that arrive are answered
// UNAVAILABLE_IN_CURRENT_STATUS), the calls already running finish (each
// is bounded by its RPC and transfer deadlines), then the connections
// close, so dummies see the daemon gone, and every region is unmapped.
// The real client is the caller's to close afterwards.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	sessions := make([]*session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	s.ln.Close()
	var wg sync.WaitGroup
	for _, sess := range sessions {
		wg.Add(1)
		go func() { defer wg.Done(); sess.drain() }()
	}
	wg.Wait()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.scopes {
		if sc.cache != nil {
			sc.cache.Close()
		}
	}
}

// joinScope returns the named scope, making it (and its cache) on first
// use, and counts one more session in it.
func (s *Server) joinScope(name string) *scope {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc, ok := s.scopes[name]; ok {
		sc.sessions++
		return sc
	}
	sc := &scope{name: name, sessions: 1}
	if s.cfg.HotCache.Size > 0 {
		c, err := hotcache.New(s.cfg.HotCache)
		if err != nil {
			slog.Warn("mooncake_client: running without a hot cache for this scope", "scope", name, "err", err)
		} else {
			sc.cache = c
		}
	}
	s.scopes[name] = sc
	return sc
}

// leaveScope counts one session less in sc; the last one to leave frees
// the scope and its cache (a dummy of it that comes back starts a new,
// empty one). No dummy maps the freed cache any more: each stops reading
// its mapping when its connection ends.
func (s *Server) leaveScope(sc *scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc.sessions--; sc.sessions > 0 {
		return
	}
	delete(s.scopes, sc.name)
	if sc.cache != nil {
		sc.cache.Close()
	}
}

// invalidate drops keys from every scope's cache: a write or remove made
// through any dummy is seen by all of them.
func (s *Server) invalidate(keys []string) {
	for _, sc := range s.scopeList() {
		if sc.cache != nil {
			for _, k := range keys {
				sc.cache.Invalidate(k)
			}
		}
	}
}

// clearCaches empties every scope's cache.
func (s *Server) clearCaches() {
	for _, sc := range s.scopeList() {
		if sc.cache != nil {
			sc.cache.Clear()
		}
	}
}

func (s *Server) scopeList() []*scope {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*scope, 0, len(s.scopes))
	for _, sc := range s.scopes {
		out = append(out, sc)
	}
	return out
}

// scope is one worker scope: its hot cache (nil when disabled) and how
// many sessions belong to it (guarded by Server.mu).
type scope struct {
	name     string
	cache    *hotcache.Cache
	sessions int
}

func (sc *scope) counters() *scopeCounters {
	if sc.cache == nil {
		return &scopeCounters{}
	}
	st := sc.cache.Stats()
	_, _, shared := sc.cache.Shared()
	return &scopeCounters{Enabled: true, Shared: shared, BlockSize: sc.cache.BlockSize(), Hits: st.Hits, Misses: st.Misses,
		Fills: st.Fills, Invalidations: st.Invalidations, Bypasses: st.Bypasses}
}
