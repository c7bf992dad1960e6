package master

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// MetadataDeleter is the part of the HTTP metadata store (metaserver.Server)
// the master uses to drop a dead client's Transfer Engine metadata.
type MetadataDeleter interface {
	Delete(key string) bool
}

// Options configures a Server. The zero value is usable: every zero field
// means the default.
type Options struct {
	// Config is the object table's configuration; the zero Config means
	// DefaultConfig(). To change a field, start from DefaultConfig.
	Config Config
	// Clock returns the current time; time.Now when nil. Tests may inject
	// a fake clock.
	Clock func() time.Time
	// EvictionInterval is how often the eviction loop checks the
	// watermark (upstream: 10 ms); 100 ms when zero. The loop is also
	// woken at once by an allocation failure.
	EvictionInterval time.Duration
	// ClientCheckInterval is how often silent clients are expired and
	// quarantined buffers released (upstream: 1 s); 1 s when zero.
	ClientCheckInterval time.Duration
	// Logger receives the server's logs; slog.Default() when nil.
	Logger *slog.Logger
	// Metadata, when set with CleanupMetadataOnTimeout, has the
	// mooncake/ram/<segment> and mooncake/rpc_meta/<segment> keys of an
	// expired client's segments deleted (--enable_metadata_cleanup_on_timeout),
	// with the MC_METADATA_CLUSTER_ID prefix the engines use
	// (metadata.SegmentKey).
	Metadata                 MetadataDeleter
	CleanupMetadataOnTimeout bool
	// Standby makes the server start refusing RPCs (gRPC Unavailable)
	// until SetLeader(true, ...) is called; HA mode uses it.
	Standby bool
	// HA and ClusterID are reported by GET /status: whether the master
	// runs leader election, and its --cluster_id.
	HA        bool
	ClusterID string
	// TenantTokens, when not nil, makes every tenant prove itself with a
	// token (--tenant_tokens_file; TenantTokens). It needs
	// Config.MultiTenant.
	TenantTokens *TenantTokens
	// RequireClientSecret refuses every call that names a client id
	// without a client secret (--require_client_secret), so that no id is
	// left unbound (client_identity.go). With TenantTokens it is on
	// whatever this says.
	RequireClientSecret bool
	// AdminAllowRemote lets admin requests that change state (tenant
	// quotas, drain jobs) come from other hosts when no TenantTokens are
	// configured (--admin_allow_remote); see authorizeChange.
	AdminAllowRemote bool
	// TenantPolicyFile, when set, is the tenant quota policy file
	// (--tenant_quota_connector_uri with the file connector;
	// tenant_policy_file.go): its tenants are registered at start, and
	// every quota change through the admin API is written back to it. It
	// needs Config.MultiTenant, and a master without HA (with HA the
	// quotas replicate through the oplog).
	TenantPolicyFile string
}

// Server serves the Master gRPC service over one State guarded by a
// mutex, and runs the background loops (Start) that drive eviction,
// stale-write release and client expiry. A server that is not the leader
// (HA standby) answers every RPC with gRPC Unavailable.
type Server struct {
	masterpb.UnimplementedMasterServer

	opts   Options
	clock  func() time.Time
	log    *slog.Logger
	leader atomic.Bool
	view   atomic.Uint64
	// fence is the HA leadership GET /role confirms in etcd (role.go);
	// nil when not leading.
	fence atomic.Pointer[leaderFence]

	mu sync.Mutex
	st *State

	// rep replicates the state through the oplog (oplog_server.go); nil
	// without --enable_oplog.
	rep *replicator
	// kvGate gates the KV cache events (kv_events.go); nil without them.
	kvGate *kvEventGate
	// policy serializes the writes of Options.TenantPolicyFile.
	policy policyWriter

	wake      chan struct{}
	lastKick  atomic.Int64 // unix ns of the last watermark kick
	stop      chan struct{}
	done      sync.WaitGroup
	startOnce sync.Once
	stopOnce  sync.Once
}

// NewServer returns a server with an empty table; call Start to run its
// background loops and Register to expose it on a grpc.Server.
func NewServer(opts Options) (*Server, error) {
	if opts.Config == (Config{}) {
		opts.Config = DefaultConfig()
	}
	if opts.TenantTokens != nil && !opts.Config.MultiTenant {
		return nil, errors.New("master: tenant tokens need multi-tenancy (--enable_multi_tenants)")
	}
	if opts.TenantPolicyFile != "" && (!opts.Config.MultiTenant || opts.Standby) {
		return nil, errors.New("master: a tenant quota policy file needs multi-tenancy (--enable_multi_tenants) and no HA (with --enable_ha the quotas replicate through the oplog)")
	}
	st, err := NewState(opts.Config)
	if err != nil {
		return nil, err
	}
	if opts.TenantPolicyFile != "" {
		if err := loadTenantPolicy(st, opts.TenantPolicyFile); err != nil {
			return nil, err
		}
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.EvictionInterval <= 0 {
		opts.EvictionInterval = 100 * time.Millisecond
	}
	if opts.ClientCheckInterval <= 0 {
		opts.ClientCheckInterval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{
		opts: opts, clock: opts.Clock, log: opts.Logger, st: st,
		wake: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	s.leader.Store(!opts.Standby)
	s.gateKVEvents()
	return s, nil
}

// Register adds the Master and DiskTier services to g: a grpc.Server, or
// the framed transport's server.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	if s.rep != nil {
		s.rep.register(g)
		return
	}
	masterpb.RegisterMasterServer(g, s)
	masterpb.RegisterDiskTierServer(g, diskServer{s: s})
}

// Start runs the background loops until Close.
func (s *Server) Start() {
	s.startOnce.Do(func() {
		s.done.Add(2)
		go s.evictionLoop()
		go s.clientLoop()
	})
}

// Close stops the background loops and waits for them.
func (s *Server) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.done.Wait()
}

// IsLeader reports whether the server is serving RPCs.
func (s *Server) IsLeader() bool { return s.leader.Load() }

// SetLeader switches serving on or off. Either way the table is reset to
// empty: a new leader starts without metadata (clients remount), and a
// deposed one must not keep stale state. version is the view version
// reported by Ping.
func (s *Server) SetLeader(leader bool, version uint64) {
	s.mu.Lock()
	st, err := NewState(s.opts.Config)
	if err == nil { // Config was validated by NewServer
		s.st = st
	}
	s.view.Store(version)
	s.leader.Store(leader)
	s.mu.Unlock()
}

// Stats returns a snapshot of the metrics.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Stats()
}

// WithState runs f with exclusive access to the state machine, for admin
// queries and tests. f must not keep st.
func (s *Server) WithState(f func(st *State, now time.Time)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.st, s.clock())
}

// errNotLeader is returned to RPCs on a standby.
var errNotLeader = status.Error(codes.Unavailable, "mooncake_master: not the leader")

// errNotReplicated refuses a state change the oplog cannot carry.
var errNotReplicated = status.Error(codes.Unimplemented, "mooncake_master: this change is not replicated by the oplog (--enable_oplog)")

// do runs f under the lock, or refuses when not the leader. With the
// oplog it runs only inside a logged or replayed entry.
func (s *Server) do(f func(st *State, now time.Time)) error {
	if s.rep != nil && !s.rep.inOp.Load() {
		return errNotReplicated
	}
	if !s.leader.Load() && s.rep == nil {
		return errNotLeader
	}
	s.mu.Lock()
	f(s.st, s.now())
	need := s.st.NeedEviction()
	above := !need && s.st.AboveHighWatermark()
	s.mu.Unlock()
	if need || (above && s.kickDue()) {
		s.kickEviction()
	}
	return nil
}

// minKickInterval spaces the eviction runs an RPC triggers by leaving the
// pool above the high watermark (upstream's eviction thread polls every
// 10 ms; the loop here ticks every EvictionInterval, so fast writers would
// otherwise fill the headroom above the watermark before the next tick).
const minKickInterval = 10 * time.Millisecond

// kickDue reports whether minKickInterval has passed since the last
// watermark kick, and records this one.
func (s *Server) kickDue() bool {
	now := time.Now().UnixNano()
	last := s.lastKick.Load()
	return now-last >= int64(minKickInterval) && s.lastKick.CompareAndSwap(last, now)
}

// kickEviction wakes the eviction loop without blocking.
func (s *Server) kickEviction() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Server) evictionLoop() {
	defer s.done.Done()
	t := time.NewTicker(s.opts.EvictionInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.wake:
		}
		if !s.leader.Load() {
			continue
		}
		if s.rep != nil {
			s.rep.evictTick()
			continue
		}
		s.mu.Lock()
		res := s.st.Evict(s.clock())
		s.mu.Unlock()
		if res.Plan.Triggered && len(res.Evicted) > 0 {
			s.log.Info("evicted objects", "count", len(res.Evicted), "freed_bytes", res.FreedBytes,
				"used_ratio", res.Plan.UsedRatio, "target", res.Plan.Target)
		}
	}
}

func (s *Server) clientLoop() {
	defer s.done.Done()
	t := time.NewTicker(s.opts.ClientCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if !s.leader.Load() {
			continue
		}
		if s.rep != nil {
			s.rep.clientTick()
			continue
		}
		s.mu.Lock()
		expired, discarded, fsDeletes := s.clientPass(s.clock())
		s.mu.Unlock()
		s.clientSideEffects(expired, discarded, fsDeletes)
	}
}
