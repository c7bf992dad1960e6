package master

import (
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/mooncake-go/mooncake/kvstore"
)

// counters are the monotonic counters State keeps.
type counters struct {
	requests       map[string]uint64 // per operation
	failures       map[string]uint64 // per operation, non-OK results
	evictedKeys    uint64
	evictedBytes   uint64
	evictionRuns   uint64
	preempted      uint64
	partialAllocs  uint64
	expiredClients uint64
	// suspectedClients counts clients made suspect, restoredClients
	// suspect clients heard from again, replacedSegments segments
	// unmounted because their memory was re-created (segments.go).
	suspectedClients uint64
	restoredClients  uint64
	replacedSegments uint64
	// identityRefused counts calls refused because they named a client id
	// without that client's secret (client_identity.go).
	identityRefused uint64
	// dynReplProposals counts hot keys dynamic replication admitted,
	// dynReplTasks the copy tasks it queued for them.
	dynReplProposals uint64
	dynReplTasks     uint64
}

// Ops names every operation State counts, so that their counters are
// exported (at zero) before the first request. The server adds the batch
// forms (batch_put_start, ...), whose items are also counted one by one
// under the single operation.
var Ops = []string{
	"put_start", "put_end", "put_revoke", "upsert_start",
	"get_replica_list", "exist_key", "remove", "remove_by_regex", "remove_all",
	"mount_segment", "remount_segment", "unmount_segment", "drain_segment", "ping",
	"batch_put_start", "batch_put_end", "batch_put_revoke", "batch_upsert_start",
	"reserve", "put_commit", "batch_put_commit",
	"batch_get_replica_list", "batch_exist_key", "batch_remove",
	"batch_replica_clear", "create_copy_task", "create_move_task", "query_task", "mark_task_complete",
}

func newCounters() counters {
	c := counters{requests: make(map[string]uint64), failures: make(map[string]uint64)}
	for _, op := range Ops {
		c.requests[op] = 0
	}
	return c
}

// result counts one request of op and its failure, and returns code.
func (c *counters) result(op string, code kvstore.ErrorCode) kvstore.ErrorCode {
	c.requests[op]++
	if code != kvstore.OK {
		c.failures[op]++
	}
	return code
}

// CountRequest counts one request of op (for RPCs that are not a single
// State call, such as the batch forms).
func (s *State) CountRequest(op string) { s.m.requests[op]++ }

// Stats is a snapshot of the master's gauges and counters.
type Stats struct {
	CapacityBytes   uint64
	AllocatedBytes  uint64
	KeyCount        int
	SoftPinKeyCount int
	ActiveClients   int
	Segments        int
	Quarantined     int // buffers held by preempted or replaced writes
	Requests        map[string]uint64
	Failures        map[string]uint64
	EvictedKeys     uint64
	EvictedBytes    uint64
	EvictionRuns    uint64
	PreemptedWrites uint64
	PartialAllocs   uint64
	ExpiredClients  uint64
	// SuspectClients and SuspectSegments are the clients silent past
	// ClientTTL (not yet forgotten) and their segments.
	SuspectClients   int
	SuspectSegments  int
	SuspectedClients uint64 // clients made suspect
	RestoredClients  uint64 // suspect clients heard from again
	ReplacedSegments uint64 // segments dropped for re-created memory
	IdentityRefused  uint64 // calls that named a client id without its secret
	// DynamicReplicationProposals counts the hot keys dynamic
	// replication admitted, DynamicReplicationTasks the copy tasks it
	// queued for them (enforce mode).
	DynamicReplicationProposals uint64
	DynamicReplicationTasks     uint64
	Tenants                     []TenantInfo
	Disk                        DiskStats
}

// Stats returns the current gauges and a copy of the counters.
// ActiveClients counts the clients heard from within ClientTTL (neither
// suspect nor forgotten), whether or not they have remounted.
func (s *State) Stats() Stats {
	st := Stats{
		KeyCount: s.objects.len(), SoftPinKeyCount: s.softPins, ActiveClients: len(s.clients), Segments: len(s.segOrder),
		Quarantined: len(s.discarded),
		Requests:    make(map[string]uint64, len(s.m.requests)),
		Failures:    make(map[string]uint64, len(s.m.failures)),
		EvictedKeys: s.m.evictedKeys, EvictedBytes: s.m.evictedBytes, EvictionRuns: s.m.evictionRuns,
		PreemptedWrites: s.m.preempted, PartialAllocs: s.m.partialAllocs, ExpiredClients: s.m.expiredClients,
		SuspectedClients: s.m.suspectedClients, RestoredClients: s.m.restoredClients, ReplacedSegments: s.m.replacedSegments,
		IdentityRefused: s.m.identityRefused, Tenants: s.Tenants(), Disk: s.diskStats(),
		DynamicReplicationProposals: s.m.dynReplProposals, DynamicReplicationTasks: s.m.dynReplTasks,
	}
	for _, sg := range s.segOrder {
		st.CapacityBytes += sg.alloc.Size()
		st.AllocatedBytes += sg.alloc.Allocated()
		if sg.suspect {
			st.SuspectSegments++
		}
	}
	for _, c := range s.clients {
		if c.suspect {
			st.SuspectClients++
			st.ActiveClients--
		}
	}
	for k, v := range s.m.requests {
		st.Requests[k] = v
	}
	for k, v := range s.m.failures {
		st.Failures[k] = v
	}
	return st
}

// WritePrometheus writes st in the Prometheus text exposition format, with
// upstream's metric names (prefix master_). Per-operation counters are
// master_<op>_requests_total and master_<op>_failures_total.
func (st Stats) WritePrometheus(w io.Writer) error {
	type metric struct {
		name, typ, help string
		v               float64
	}
	ms := []metric{
		{"master_total_capacity_bytes", "gauge", "Total bytes of mounted segments.", float64(st.CapacityBytes)},
		{"master_allocated_bytes", "gauge", "Bytes reserved for replicas.", float64(st.AllocatedBytes)},
		{"master_key_count", "gauge", "Number of objects.", float64(st.KeyCount)},
		{"master_soft_pin_key_count", "gauge", "Number of soft-pinned objects.", float64(st.SoftPinKeyCount)},
		{"master_active_clients", "gauge", "Clients heard from within client_ttl.", float64(st.ActiveClients)},
		{"master_mounted_segments", "gauge", "Number of mounted segments.", float64(st.Segments)},
		{"master_quarantined_buffers", "gauge", "Buffers of preempted or replaced writes awaiting release.", float64(st.Quarantined)},
		{"master_evicted_key_count", "counter", "Objects evicted.", float64(st.EvictedKeys)},
		{"master_evicted_size_bytes", "counter", "Bytes freed by eviction.", float64(st.EvictedBytes)},
		{"master_eviction_runs_total", "counter", "Eviction rounds triggered.", float64(st.EvictionRuns)},
		{"master_put_start_preempted_total", "counter", "Stale writes preempted.", float64(st.PreemptedWrites)},
		{"master_put_start_partial_allocations_total", "counter", "Writes granted fewer replicas than asked.", float64(st.PartialAllocs)},
		{"master_expired_clients_total", "counter", "Clients forgotten for silence (client_dead_ttl).", float64(st.ExpiredClients)},
		{"master_suspect_clients", "gauge", "Clients silent past client_ttl, not yet forgotten.", float64(st.SuspectClients)},
		{"master_suspect_segments", "gauge", "Segments of suspect clients: no new replicas, replicas kept.", float64(st.SuspectSegments)},
		{"master_suspected_clients_total", "counter", "Clients made suspect for silence (client_ttl).", float64(st.SuspectedClients)},
		{"master_restored_clients_total", "counter", "Suspect clients heard from again, their replicas kept.", float64(st.RestoredClients)},
		{"master_replaced_segments_total", "counter", "Segments dropped because their memory was re-created (another incarnation).", float64(st.ReplacedSegments)},
		{"master_client_identity_refused_total", "counter", "Calls refused because they named a client id without that client's secret.", float64(st.IdentityRefused)},
		{"master_local_disks", "gauge", "Storage clients' disks mounted (disk tier).", float64(st.Disk.Disks)},
		{"master_disk_only_key_count", "gauge", "Objects readable from disk replicas only.", float64(st.Disk.DiskOnlyKeys)},
		{"master_offloads_pending", "gauge", "Offloads queued or in flight.", float64(st.Disk.PendingOffloads)},
		{"master_promotions_pending", "gauge", "Promotions queued or in flight.", float64(st.Disk.PendingPromotions)},
		{"master_dynamic_replication_proposals_total", "counter", "Hot keys admitted for one more memory replica (dynamic replication).", float64(st.DynamicReplicationProposals)},
		{"master_dynamic_replication_tasks_total", "counter", "Copy tasks dynamic replication queued (enforce mode).", float64(st.DynamicReplicationTasks)},
	}
	ops := make([]string, 0, len(st.Requests))
	for op := range st.Requests {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		ms = append(ms,
			metric{"master_" + op + "_requests_total", "counter", "Requests of " + op + ".", float64(st.Requests[op])},
			metric{"master_" + op + "_failures_total", "counter", "Failed requests of " + op + ".", float64(st.Failures[op])})
	}
	for _, m := range ms {
		if _, err := fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", m.name, m.help, m.name, m.typ, m.name, strconv.FormatFloat(m.v, 'f', -1, 64)); err != nil {
			return err
		}
	}
	return st.writeTenantMetrics(w)
}

// writeTenantMetrics writes the per-tenant gauges, one sample per
// registered tenant labelled tenant_id.
func (st Stats) writeTenantMetrics(w io.Writer) error {
	gauges := []struct {
		name, help string
		v          func(TenantInfo) uint64
	}{
		{"master_tenant_used_bytes", "Bytes of replicas a tenant's objects hold.", func(t TenantInfo) uint64 { return t.UsedBytes }},
		{"master_tenant_quota_bytes", "A tenant's quota in bytes of replicas (0: no limit).", func(t TenantInfo) uint64 { return t.QuotaBytes }},
		{"master_tenant_key_count", "Number of a tenant's objects.", func(t TenantInfo) uint64 { return uint64(t.Objects) }},
	}
	for _, g := range gauges {
		if _, err := fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", g.name, g.help, g.name); err != nil {
			return err
		}
		for _, t := range st.Tenants {
			if _, err := fmt.Fprintf(w, "%s{tenant_id=%s} %d\n", g.name, strconv.Quote(t.ID), g.v(t)); err != nil {
				return err
			}
		}
	}
	return nil
}
