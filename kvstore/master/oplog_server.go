package master

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
	temeta "github.com/mooncake-go/mooncake/transfer/metadata"
)

// This file makes a Server a replicated state machine (--enable_oplog).
// Every call that reaches the state machine runs under one order lock,
// at a time the call carries, and is logged in that order; a standby
// replays the log through the very same handlers, so leader and
// standbys hold the same state after the same prefix of the log. A call
// is answered only once its batch is durable in etcd, reads included:
// an answer proves that its master was the leader when the batch was
// written (oplogWriter's fencing condition), so a deposed leader never
// answers.

// errNotDurable answers a call whose batch failed: the master lost its
// leadership (or etcd) before the change was durable. The client's
// library reports RPC_FAIL; a retry reaches the new leader.
var errNotDurable = status.Error(codes.Unavailable, "mooncake_master: leadership lost before the change was durable; retry")

// notDurable is the answer to a call whose batch failed with err: the
// cause when an operator must act (etcd full), else errNotDurable.
func notDurable(err error) error {
	if errors.Is(err, replication.ErrEtcdFull) {
		return status.Error(codes.Unavailable, "mooncake_master: the change is not durable: "+replication.ErrEtcdFull.Error())
	}
	return errNotDurable
}

// replayKey marks the context of a call replayed from the log.
type replayKey struct{}

// isReplay reports whether ctx is a replayed call's: its tenant token
// was checked by the leader, which logs only calls that passed.
func isReplay(ctx context.Context) bool { return ctx.Value(replayKey{}) != nil }

// replicatedMetadata are the incoming metadata keys a replayed call needs
// (scope); the tenant token is not among them: it never goes to etcd, and
// neither does the client secret (intercept logs its key instead).
var replicatedMetadata = []string{kvstore.TenantMetadataKey, kvstore.NamespaceMetadataKey}

// loggedHandler is one method a log entry can name.
type loggedHandler struct {
	impl    any
	handler func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error)
}

// splitMix is a tiny random source whose whole state is one number, so
// that every entry can start the state's draws from its entry number.
type splitMix struct{ x uint64 }

func (m *splitMix) Uint64() uint64 {
	m.x += 0x9e3779b97f4a7c15
	z := m.x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
func (m *splitMix) Int63() int64    { return int64(m.Uint64() >> 1) }
func (m *splitMix) Seed(seed int64) { m.x = uint64(seed) }

// replicator is a Server's oplog side: the state machine the log
// (package replication) replicates, and the calls it logs. The log holds
// the order lock, the entry numbering and the batches; the elector
// (replication.RunElection) runs the standby's tailer and the
// promotions.
type replicator struct {
	s        *Server
	handlers map[string]loggedHandler
	log      *replication.Log

	// now and inOp describe the entry being applied (under the log's
	// order lock).
	now  time.Time
	inOp atomic.Bool
	src  splitMix
	rng  *rand.Rand
}

// EnableOplog makes the server log every state change and replay a
// leader's log (runElection drives it). Call it before Register.
func (s *Server) EnableOplog() {
	r := &replicator{s: s, handlers: map[string]loggedHandler{}}
	r.rng = rand.New(&r.src)
	r.log = replication.New(r, s.opts.ClusterID, s.log, func() time.Time { return s.clock() })
	s.rep = r
	if s.kvGate != nil {
		s.kvGate.hold = true
	}
}

// now is the time state calls see: the entry's while one is applied.
func (s *Server) now() time.Time {
	if s.rep != nil && s.rep.inOp.Load() {
		return s.rep.now
	}
	return s.clock()
}

// register adds the Master and DiskTier services with every method
// going through intercept.
func (r *replicator) register(g grpc.ServiceRegistrar) {
	g.RegisterService(r.wrap(&masterpb.Master_ServiceDesc, r.s), r.s)
	g.RegisterService(r.wrap(&masterpb.DiskTier_ServiceDesc, diskServer{s: r.s}), diskServer{s: r.s})
}

// wrap returns a copy of desc whose handlers run through intercept, and
// records the originals for replay.
func (r *replicator) wrap(desc *grpc.ServiceDesc, impl any) *grpc.ServiceDesc {
	d := *desc
	d.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i, m := range d.Methods {
		orig := m.Handler
		r.handlers["/"+desc.ServiceName+"/"+m.MethodName] = loggedHandler{impl: impl, handler: orig}
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return orig(srv, ctx, dec, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if ic != nil {
					return ic(ctx, req, info, func(ctx context.Context, req any) (any, error) {
						return r.intercept(ctx, req, info.FullMethod, h)
					})
				}
				return r.intercept(ctx, req, info.FullMethod, h)
			})
		}
	}
	return &d
}

// begin starts applying entry e (the order lock held): the state sees e's time
// and draws from e's number.
// Times are wall clock only (Round(0)): a replica decodes no monotonic
// reading, and the leader must compare the same times it logs.
func (r *replicator) begin(e *replication.Entry) {
	r.now = e.Now
	r.inOp.Store(true)
	r.src.Seed(int64(e.N))
	r.s.st.rng = r.rng
	r.s.st.ids = r.rng
}

// end finishes the entry begun last.
func (r *replicator) end() {
	r.inOp.Store(false)
}

// intercept runs one call as a logged entry on the leader and answers
// once its batch is durable. A batch call too large for one entry runs
// as several, one per part (callParts), back to back under the order
// lock, and is answered once the last one is durable.
func (r *replicator) intercept(ctx context.Context, req any, method string, h grpc.UnaryHandler) (any, error) {
	if !r.s.leader.Load() {
		return nil, errNotLeader
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Error(codes.Internal, "mooncake_master: request is not a protobuf message")
	}
	var md map[string]string
	for _, k := range replicatedMetadata {
		if v := metadata.ValueFromIncomingContext(ctx, k); len(v) > 0 {
			if md == nil {
				md = map[string]string{}
			}
			md[k] = v[0]
		}
	}
	// The client secret stays out of the log; its key goes in, so that a
	// replayed call binds and checks what the leader did.
	if v := metadata.ValueFromIncomingContext(ctx, kvstore.ClientSecretMetadataKey); len(v) > 0 {
		if md == nil {
			md = map[string]string{}
		}
		md[clientKeyMetadataKey] = loggedClientKey(v[0])
	}
	// A call its tenant token refuses changes nothing: it is answered
	// but not logged (a replay skips the token check).
	refused := r.s.opts.TenantTokens != nil && r.s.scope(ctx).code == kvstore.IllegalClient
	parts := []callPart{{req: msg}}
	if !refused {
		var err error
		if parts, err = callParts(method, md, msg); err != nil {
			r.s.log.Error("oplog: call refused: it cannot be logged", "method", method, "err", err)
			return nil, status.Errorf(codes.Internal, "mooncake_master: the oplog cannot carry this call: %v", err)
		}
	}
	ping, isPing := req.(*masterpb.PingRequest)
	known := isPing && r.s.knownClient(ping.GetClientId())
	var resp any
	var herr error
	var whole proto.Message
	var t *replication.Ticket
	unlogged := false
	leads := r.log.Do(func(tx replication.Tx) {
		now := r.s.clock().Round(0)
		for _, p := range parts {
			e := &replication.Entry{Kind: replication.KindRPC, N: tx.Next(), Now: now, Name: method, MD: md, Payload: p.payload}
			r.begin(e)
			presp, perr := h(ctx, p.req)
			r.end()
			if refused || (known && heartbeatOnly(presp)) {
				r.releaseEvents(nil)
				resp, herr, unlogged = presp, perr, true
				return
			}
			t = tx.Append(e)
			if resp, herr = presp, perr; perr != nil {
				break // the parts after it neither run nor are logged
			}
			if len(parts) > 1 {
				whole = batchSplits[method].join(whole, presp.(proto.Message), p.offset)
				resp = whole
			}
		}
	})
	if !leads {
		return nil, errNotLeader
	}
	if unlogged {
		return resp, herr
	}
	if err := t.Wait(ctx); err != nil {
		return nil, notDurable(err)
	}
	return resp, herr
}

// knownClient reports whether the client is in the state's OK set and
// not suspect (a suspect client's ping restores it, a change).
func (s *Server) knownClient(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.st.clients[id]
	return ok && c.ok && !c.suspect
}

// heartbeatOnly reports whether a known client's Ping answer shows it
// changed nothing but the heartbeat time (no task handed out, and the
// client still ok: a ping from another incarnation drops its segments).
// Such pings are not logged: heartbeats are not replicated (expiry is
// logged by its outcome, and a promotion restarts every heartbeat), which
// keeps an idle cluster's log from growing with its pings.
func heartbeatOnly(resp any) bool {
	p, ok := resp.(*masterpb.PingResponse)
	return ok && p.GetErrorCode() == 0 && len(p.GetTasks()) == 0 && p.GetClientStatus() == masterpb.ClientStatus_CLIENT_OK
}

// logLocal applies a change the master makes on its own (a tick, an
// admin change) as a logged entry, when it is leader. It returns the
// entry's ticket, nil when not leader.
func (r *replicator) logLocal(kind replication.Kind, name string, payload []byte, apply func(now time.Time)) *replication.Ticket {
	var t *replication.Ticket
	r.log.Do(func(tx replication.Tx) {
		t = r.logWith(tx, kind, name, func(now time.Time) []byte {
			apply(now)
			return payload
		})
	})
	return t
}

// logWith applies and appends an entry of the master's own whose
// payload is the outcome of applying it (the order lock held as tx).
func (r *replicator) logWith(tx replication.Tx, kind replication.Kind, name string, apply func(now time.Time) []byte) *replication.Ticket {
	e := &replication.Entry{Kind: kind, N: tx.Next(), Now: r.s.clock().Round(0), Name: name}
	r.begin(e)
	e.Payload = apply(e.Now)
	r.end()
	return tx.Append(e)
}

// releaseEvents hands the KV events held since the last call to entry e,
// to be published once e's batch is durable (the order lock held, before
// e is appended). With e nil, for a call that changed nothing the log keeps,
// they are published at once.
func (r *replicator) releaseEvents(e *replication.Entry) {
	g := r.s.kvGate
	if g == nil {
		return
	}
	evs := g.take()
	if len(evs) == 0 {
		return
	}
	if e == nil {
		g.emit(evs...)
		return
	}
	e.OnDurable = func() { g.emit(evs...) }
}

// replay applies one entry from the log, or one the log appends on its
// own (the order lock held).
func (r *replicator) replay(e *replication.Entry) {
	r.begin(e)
	defer r.end()
	s := r.s
	switch e.Kind {
	case replication.KindRPC:
		h, ok := r.handlers[e.Name]
		if !ok {
			s.log.Error("oplog: entry names an unknown method; skipped", "method", e.Name, "entry", e.N)
			return
		}
		ctx := context.WithValue(context.Background(), replayKey{}, true)
		if len(e.MD) > 0 {
			ctx = metadata.NewIncomingContext(ctx, metadata.New(e.MD))
		}
		dec := func(v any) error { return proto.Unmarshal(e.Payload, v.(proto.Message)) }
		if _, err := h.handler(h.impl, ctx, dec, nil); err != nil {
			s.log.Warn("oplog: replayed call failed", "method", e.Name, "entry", e.N, "err", err)
		}
	case replication.KindEvictTick:
		s.mu.Lock()
		s.st.Evict(e.Now)
		s.mu.Unlock()
	case replication.KindClientTick:
		s.mu.Lock()
		s.st.expireExactly(decodeClientExpiry(e.Payload), e.Now)
		s.clientPass(e.Now)
		s.mu.Unlock()
	case replication.KindPromote:
		s.mu.Lock()
		s.st.restartHeartbeats(e.Now)
		s.mu.Unlock()
	case replication.KindTenantQuotaSet:
		q, _ := binary.Uvarint(e.Payload)
		s.mu.Lock()
		s.st.SetTenantQuota(e.Name, q)
		s.mu.Unlock()
	case replication.KindTenantQuotaDelete:
		s.mu.Lock()
		s.st.DeleteTenantQuota(e.Name)
		s.mu.Unlock()
	case replication.KindReset:
		s.resetState()
	default:
		s.log.Error("oplog: entry of unknown kind; skipped", "kind", e.Kind, "entry", e.N)
	}
}

// clientPass judges silent clients and releases what is due at now
// (s.mu held); the clientLoop's state part.
func (s *Server) clientPass(now time.Time) (expired ClientExpiry, discarded int, fsDeletes []string) {
	expired = s.st.ExpireClients(now)
	discarded = s.st.ReleaseExpired(now)
	fsDeletes = s.st.TakeFSDeletes()
	return expired, discarded, fsDeletes
}

// expireExactly makes the next ExpireClients at now make suspect and
// forget exactly the clients ex names: a replica does not know the
// heartbeats the leader saw (they are not logged), only what it judged.
// Another client's last contact moves up only as far as it must (to
// now - ClientTTL), so a replica whose clients' contacts were all logged
// keeps the leader's times.
func (s *State) expireExactly(ex ClientExpiry, now time.Time) {
	gone, suspect := map[string]bool{}, map[string]bool{}
	for _, id := range ex.Dead {
		gone[id] = true
	}
	for _, id := range ex.Suspected {
		suspect[id] = true
	}
	floor := now.Add(-s.cfg.ClientTTL)
	for id, c := range s.clients {
		if gone[id] {
			c.lastSeen = time.Time{}
		} else if suspect[id] {
			c.lastSeen = floor.Add(-time.Nanosecond)
		} else if c.lastSeen.Before(floor) {
			c.lastSeen = floor
		}
	}
}

// encodeClientExpiry and decodeClientExpiry carry a client pass's
// judgement in its entry: the forgotten clients' ids, then, when some
// became suspect, an empty string (no client id is empty) and theirs. An
// entry of a master that knew no suspect clients holds the first part
// only.
func encodeClientExpiry(ex ClientExpiry) []byte {
	var b []byte
	for _, id := range ex.Dead {
		b = replication.AppendString(b, id)
	}
	if len(ex.Suspected) > 0 {
		b = replication.AppendString(b, "")
		for _, id := range ex.Suspected {
			b = replication.AppendString(b, id)
		}
	}
	return b
}

func decodeClientExpiry(b []byte) ClientExpiry {
	d := &replication.Decoder{B: b}
	var ex ClientExpiry
	ids := &ex.Dead
	for len(d.B) > 0 && d.Err == nil {
		if id := d.Bytes(); d.Err == nil {
			if len(id) == 0 {
				ids = &ex.Suspected
				continue
			}
			*ids = append(*ids, string(id))
		}
	}
	return ex
}

// restartHeartbeats counts every known client as heard from at now: a
// promoted leader gives each client a whole ClientTTL to reach it.
func (s *State) restartHeartbeats(now time.Time) {
	for _, c := range s.clients {
		c.lastSeen = now
	}
}

// evictTick is the eviction loop's turn with the oplog: it runs (and is
// logged) only when there is something to do.
func (r *replicator) evictTick() {
	s := r.s
	s.mu.Lock()
	due := s.st.NeedEviction() || s.st.AboveHighWatermark()
	s.mu.Unlock()
	if !due {
		return
	}
	r.logLocal(replication.KindEvictTick, "", nil, func(now time.Time) {
		s.mu.Lock()
		res := s.st.Evict(now)
		s.mu.Unlock()
		if res.Plan.Triggered && len(res.Evicted) > 0 {
			s.log.Info("evicted objects", "count", len(res.Evicted), "freed_bytes", res.FreedBytes,
				"used_ratio", res.Plan.UsedRatio, "target", res.Plan.Target)
		}
	})
}

// clientTick is the client loop's turn with the oplog. Files and TE
// metadata of what it dropped are deleted only once the entry is durable.
func (r *replicator) clientTick() {
	s := r.s
	var expired ClientExpiry
	var discarded int
	var fsDeletes []string
	var t *replication.Ticket
	r.log.Do(func(tx replication.Tx) {
		t = r.logWith(tx, replication.KindClientTick, "", func(now time.Time) []byte {
			s.mu.Lock()
			expired, discarded, fsDeletes = s.clientPass(now)
			s.mu.Unlock()
			return encodeClientExpiry(expired)
		})
	})
	if t == nil || t.Wait(context.Background()) != nil {
		return
	}
	s.clientSideEffects(expired, discarded, fsDeletes)
}

// clientSideEffects logs and cleans up after a client pass.
func (s *Server) clientSideEffects(expired ClientExpiry, discarded int, fsDeletes []string) {
	s.deleteFSFiles(fsDeletes)
	if discarded > 0 {
		s.log.Info("discarded writes never finished", "count", discarded)
	}
	for _, id := range expired.Suspected {
		s.log.Warn("client silent past client_ttl: suspect, its segments take no new replicas and keep theirs",
			"client_id", id, "client_dead_ttl", s.opts.Config.deadTTL())
	}
	for _, e := range expired.Expired {
		s.log.Warn("client expired; segment unmounted", "client_id", e.ClientID,
			"segment_id", e.Segment.ID, "segment_name", e.Segment.Name)
		if s.opts.CleanupMetadataOnTimeout && s.opts.Metadata != nil {
			s.opts.Metadata.Delete(temeta.SegmentKey(temeta.ClusterID(), e.Segment.Name))
			s.opts.Metadata.Delete(temeta.RPCMetaKey(temeta.ClusterID(), e.Segment.Name))
		}
	}
}

// changeState applies an admin change to the state: at once without the
// oplog, as a logged entry of kind (name, payload) with it. Without the
// leadership, or when the entry is not durable, *code is set to
// UNAVAILABLE_IN_CURRENT_STATUS or RPC_FAIL.
func (s *Server) changeState(kind replication.Kind, name string, payload []byte, f func(st *State), code *kvstore.ErrorCode) {
	if s.rep == nil {
		s.WithState(func(st *State, _ time.Time) { f(st) })
		return
	}
	t := s.rep.logLocal(kind, name, payload, func(time.Time) {
		s.mu.Lock()
		f(s.st)
		s.mu.Unlock()
	})
	switch {
	case t == nil:
		*code = kvstore.UnavailableInCurrentStatus
	case t.Wait(context.Background()) != nil:
		*code = kvstore.RPCFail
	}
}
