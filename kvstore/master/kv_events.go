package master

import (
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/kvstore/kvevents"
)

// KVEventSink receives the object table's KV cache events
// (--enable_kv_events; kvevents.Publisher implements it). Publish and
// NewEpoch are called under the server's mutex and must not block.
type KVEventSink interface {
	Publish(kvevents.Event)
	NewEpoch()
	WritePrometheus(io.Writer) error
}

// Availability bits of an object's published media (object.kvMedia).
const (
	kvInCPU  uint8 = 1 << iota // a COMPLETE memory replica
	kvOnDisk                   // a LOCAL_DISK replica or a COMPLETE DISK replica
)

// kvAvailability publishes what changed in o's availability since it was
// last published: a stored event for each medium o became readable from,
// a removed event for each it no longer is (o erased: every medium). It
// is called after every change of o's replicas (charge and the few
// changes that do not reach it).
func (s *State) kvAvailability(o *object) {
	sink := s.cfg.KVEvents
	if sink == nil {
		return
	}
	var now uint8
	if s.objects.get(o.key) == o {
		for _, r := range o.replicas {
			if r.status == ReplicaComplete {
				now |= kvInCPU
				break
			}
		}
		if len(o.md().disk) > 0 || o.fsReadable() {
			now |= kvOnDisk
		}
	}
	changed := now ^ o.kvMedia
	if changed == 0 {
		return
	}
	o.kvMedia = now
	tenant, key := s.splitKey(o.key)
	for _, m := range [...]struct {
		bit    uint8
		medium kvevents.Medium
	}{{kvInCPU, kvevents.MediumCPU}, {kvOnDisk, kvevents.MediumDisk}} {
		if changed&m.bit == 0 {
			continue
		}
		kind := kvevents.Removed
		if now&m.bit != 0 {
			kind = kvevents.Stored
		}
		sink.Publish(kvevents.Event{Kind: kind, Medium: m.medium, Tenant: tenant, Key: key})
	}
}

// kvCleared publishes cleared for tenant once a remove_all has left it no
// object (upstream's rule: objects the pass skipped keep the tenant's
// view alive).
func (s *State) kvCleared(tenant string) {
	sink := s.cfg.KVEvents
	if sink == nil {
		return
	}
	if s.cfg.MultiTenant {
		prefix := tenant + tenantSep
		for o := range s.objects.all() {
			if strings.HasPrefix(o.key, prefix) {
				return
			}
		}
	} else if s.objects.len() > 0 {
		return
	}
	sink.Publish(kvevents.Event{Kind: kvevents.Cleared, Tenant: tenant})
}

// kvEventGate passes the state's events on while this master is the
// leader, and starts a new epoch in the sink on the first event of each
// new leader view; a standby (which may apply a replicated log) publishes
// nothing. With the oplog (hold), an event is held back until the change
// that made it is durable in etcd: the replication takes the events an
// entry's apply produced and releases them when the entry's batch is
// written (oplogWriter), and drops them when it never is, so a subscriber
// never hears of a change a failover could take back.
type kvEventGate struct {
	sink   KVEventSink
	leader *atomic.Bool
	view   *atomic.Uint64
	// hold is set before the server serves (EnableOplog) and not changed.
	hold bool

	heldMu sync.Mutex
	held   []kvevents.Event

	emitMu   sync.Mutex // releases come from the oplog writer's goroutine
	started  bool
	lastView uint64
}

// Publish implements KVEventSink.
func (g *kvEventGate) Publish(ev kvevents.Event) {
	if !g.leader.Load() {
		return
	}
	if g.hold {
		g.heldMu.Lock()
		g.held = append(g.held, ev)
		g.heldMu.Unlock()
		return
	}
	g.emit(ev)
}

// take returns the events held since the last take.
func (g *kvEventGate) take() []kvevents.Event {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	evs := g.held
	g.held = nil
	return evs
}

// emit passes events on to the sink, first starting a new epoch when the
// leader view changed since the last event.
func (g *kvEventGate) emit(evs ...kvevents.Event) {
	g.emitMu.Lock()
	defer g.emitMu.Unlock()
	if v := g.view.Load(); !g.started || v != g.lastView {
		if g.started {
			g.sink.NewEpoch()
		}
		g.started, g.lastView = true, v
	}
	for _, ev := range evs {
		g.sink.Publish(ev)
	}
}

// NewEpoch implements KVEventSink.
func (g *kvEventGate) NewEpoch() { g.sink.NewEpoch() }

// WritePrometheus implements KVEventSink.
func (g *kvEventGate) WritePrometheus(w io.Writer) error { return g.sink.WritePrometheus(w) }

// gateKVEvents puts the configured sink behind a kvEventGate bound to
// this server's leadership, for the current state and every state made
// from s.opts.Config later (a new leader term).
func (s *Server) gateKVEvents() {
	if s.opts.Config.KVEvents == nil {
		return
	}
	g := &kvEventGate{sink: s.opts.Config.KVEvents, leader: &s.leader, view: &s.view}
	s.kvGate = g
	s.opts.Config.KVEvents = g
	s.st.cfg.KVEvents = g
}

// writeKVEventsMetrics appends the publisher's metrics to /metrics.
func (s *Server) writeKVEventsMetrics(w io.Writer) {
	if sink := s.opts.Config.KVEvents; sink != nil {
		_ = sink.WritePrometheus(w)
	}
}
