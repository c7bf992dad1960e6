package standalone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
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
	// Allowed names the peers, besides processes of the daemon's own uid,
	// that may connect (mooncake_client's --allowed_uids and
	// --allowed_gids); everyone else is refused at accept.
	Allowed ipc.Admission
	// PerDummy bounds each dummy connection: requests served at once,
	// their bytes, and how long a reply may wait for the dummy to read
	// it (mooncake_client's --max_requests_per_dummy and
	// --dummy_reply_timeout_seconds). Zero fields take ipc's defaults;
	// Shared is set by the server.
	PerDummy ipc.Limits
	// MaxRequests bounds the requests of all dummies together
	// (--max_requests_in_flight; 0: ipc.DefaultSharedRequests).
	MaxRequests int
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
	refused            atomic.Uint64
	refusedUIDs        map[uint32]bool // uids whose refusal was logged (guarded by mu)
	budget             *ipc.Budget     // the requests of all dummies in flight
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
	s := &Server{cfg: cfg, ln: ln, sessions: map[*session]struct{}{}, scopes: map[string]*scope{}, refusedUIDs: map[uint32]bool{},
		budget: ipc.NewBudget(cfg.MaxRequests, 0)}
	s.cfg.PerDummy.Shared = s.budget
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
		if !s.admit(uc) {
			uc.Close()
			continue
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
		conn, err := ipc.NewConnLimited(uc, sess.handle, s.cfg.PerDummy)
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

// maxRefusedLogged bounds the uids whose first refusal is logged at warning
// level; later refusals are logged at debug level.
const maxRefusedLogged = 1024

// admit says whether the process that connected on uc may use the daemon
// (cfg.Allowed): the abstract socket is open to every process of the
// network namespace, so the kernel's record of the peer is what decides.
// A refusal is logged at warning level once per uid.
func (s *Server) admit(uc *net.UnixConn) bool {
	p, err := ipc.PeerOf(uc)
	if err == nil && s.cfg.Allowed.Admits(p) {
		return true
	}
	s.refused.Add(1)
	s.mu.Lock()
	first := err != nil || (!s.refusedUIDs[p.UID] && len(s.refusedUIDs) < maxRefusedLogged)
	if err == nil && first {
		s.refusedUIDs[p.UID] = true
	}
	s.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	if err != nil {
		slog.Log(context.Background(), level, "mooncake_client: refused a dummy connection", "err", err)
	} else {
		slog.Log(context.Background(), level, "mooncake_client: refused a dummy connection from a user that may not use this daemon (--allowed_uids, --allowed_gids)",
			"uid", p.UID, "gid", p.GID, "pid", p.PID, "daemon_uid", os.Geteuid())
	}
	return false
}

// Refused is how many connections were refused at accept.
func (s *Server) Refused() uint64 { return s.refused.Load() }

// Requests is the use of the budget of requests in flight: how many are
// served now, how many waited for a slot, how many connections were
// closed for not reading their replies.
func (s *Server) Requests() ipc.BudgetStats { return s.budget.Stats() }

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
