package master

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/mooncake-go/mooncake/internal/procmetrics"
	"github.com/mooncake-go/mooncake/internal/version"
)

// AdminHandler serves the master's HTTP admin endpoints (upstream's
// --metrics_port service):
//
//	GET /metrics           Prometheus text format (master_* metrics)
//	GET /health            200 "OK"
//	GET /role              "leader", "standby" or "stale" (role.go: an HA leader confirms it in etcd or Redis; stale: cannot rebuild the metadata)
//	GET /status            JSON: version, role, HA, cluster id, lease TTL, clock
//	GET /get_all_segments  plain text: one mounted segment name per line
//	GET /get_all_keys      JSON list of keys
//	GET /query_key?key=K   JSON metadata of K (404 when absent); grants no lease
//	/api/v1/tenant_quotas  tenant quota policy (handleTenantQuotas)
//	/api/v1/drain_jobs, /api/v1/segments/status  drains (admin_drain.go)
//
// With multi-tenancy, /get_all_keys and /query_key take ?tenant_id=T (the
// default tenant when absent) and show that tenant's keys. With tenant
// tokens configured they, like /api/v1/tenant_quotas, need
// "Authorization: Bearer <token>" (the admin token, or T's own); the other
// endpoints stay open.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/tenant_quotas", s.handleTenantQuotas)
	registerDrainRoutes(mux, s)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		st := s.Stats()
		_ = st.WritePrometheus(w)
		leader := 0
		if s.IsLeader() {
			leader = 1
		}
		fmt.Fprintf(w, "# HELP master_is_leader Whether this master serves RPCs.\n# TYPE master_is_leader gauge\nmaster_is_leader %d\n", leader)
		s.writeKVEventsMetrics(w)
		s.writeOplogMetrics(w)
		procmetrics.Read().Write(w)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("OK"))
	})
	mux.HandleFunc("GET /role", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(s.role(r.Context())))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.status(r.Context()))
	})
	mux.HandleFunc("GET /get_all_segments", s.handleAllSegments)
	mux.HandleFunc("GET /get_all_keys", func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := s.adminTenant(w, r)
		if !ok {
			return
		}
		var keys []string
		s.WithState(func(st *State, _ time.Time) { keys = st.TenantKeys(tenant) })
		if keys == nil {
			keys = []string{}
		}
		writeJSON(w, http.StatusOK, keys)
	})
	mux.HandleFunc("GET /query_key", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		if key == "" {
			http.Error(w, "missing key", http.StatusBadRequest)
			return
		}
		tenant, found := s.adminTenant(w, r)
		if !found {
			return
		}
		type rep struct {
			ID       uint64 `json:"id"`
			Status   string `json:"status"`
			Segment  string `json:"segment_name"`
			Endpoint string `json:"transport_endpoint"`
			Address  uint64 `json:"buffer_address"`
			Size     uint64 `json:"size"`
			Type     string `json:"replica_type"` // MEMORY or LOCAL_DISK
		}
		type info struct {
			Key         string `json:"key"`
			Size        uint64 `json:"size"`
			Writing     bool   `json:"writing"`
			LeaseMsLeft int64  `json:"lease_ms_left"`
			SoftPinned  bool   `json:"soft_pinned"`
			HardPinned  bool   `json:"hard_pinned"`
			DataType    int    `json:"data_type"`
			GroupID     string `json:"group_id"`
			Replicas    []rep  `json:"replicas"`
		}
		var out info
		s.WithState(func(st *State, now time.Time) {
			var o ObjectInfo
			o, found = st.QueryKey(s.opts.Config.ObjectKey(tenant, key))
			if !found {
				return
			}
			out = info{Key: key, Size: o.Size, Writing: o.Writing, SoftPinned: o.SoftPinned,
				HardPinned: o.HardPinned, DataType: o.DataType, GroupID: o.GroupID, Replicas: []rep{}}
			if left := o.LeaseUntil.Sub(now); left > 0 {
				out.LeaseMsLeft = left.Milliseconds()
			}
			for _, r := range o.Replicas {
				out.Replicas = append(out.Replicas, rep{r.ID, r.Status.String(), r.SegmentName, r.Endpoint, r.Address, r.Size, r.Type.String()})
			}
		})
		if !found {
			http.Error(w, "key not found", http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	return mux
}

// Status is what GET /status reports (`mooncake doctor` reads it).
type Status struct {
	Version       string `json:"version"`
	Role          string `json:"role"` // "leader", "standby" or "stale"
	HA            bool   `json:"ha"`
	ClusterID     string `json:"cluster_id"`
	ViewVersion   uint64 `json:"view_version"`
	LeaseTTLMs    int64  `json:"default_kv_lease_ttl_ms"`
	ClientTTLMs   int64  `json:"client_ttl_ms"`
	TimeUnixNano  int64  `json:"time_unix_nano"` // the master's clock when it answered
	ActiveClients int    `json:"active_clients"`
	Segments      int    `json:"segments"`
	// SuspectClients are silent past client_ttl, not yet forgotten
	// (client_dead_ttl); SuspectSegments are theirs.
	ClientDeadTTLMs int64 `json:"client_dead_ttl_ms"`
	SuspectClients  int   `json:"suspect_clients"`
	SuspectSegments int   `json:"suspect_segments"`

	// Stale says why a stale master cannot rebuild the metadata (with
	// the oplog: the log was compacted past what it applied and no usable
	// snapshot covers it); it neither stands for election nor serves.
	Stale string `json:"stale,omitempty"`
}

func (s *Server) status(ctx context.Context) Status {
	st := s.Stats()
	var stale string
	if s.rep != nil {
		stale = s.rep.staleReason()
	}
	return Status{
		Version: version.String(), Role: s.role(ctx), Stale: stale, HA: s.opts.HA, ClusterID: s.opts.ClusterID,
		ViewVersion: s.view.Load(), LeaseTTLMs: s.opts.Config.DefaultLeaseTTL.Milliseconds(),
		ClientTTLMs: s.opts.Config.ClientTTL.Milliseconds(), ActiveClients: st.ActiveClients,
		Segments: st.Segments, TimeUnixNano: s.clock().UnixNano(),
		ClientDeadTTLMs: s.opts.Config.deadTTL().Milliseconds(),
		SuspectClients:  st.SuspectClients, SuspectSegments: st.SuspectSegments,
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
