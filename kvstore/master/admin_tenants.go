package master

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// tenantQuotaRequest is the body of PUT /api/v1/tenant_quotas.
type tenantQuotaRequest struct {
	TenantID   string  `json:"tenant_id"`
	QuotaBytes *uint64 `json:"quota_bytes"`
}

// decodeTenantQuota reads a PUT /api/v1/tenant_quotas body: exactly one
// JSON object (anything after it is an error, so a truncated or
// concatenated request is not half applied).
func decodeTenantQuota(body io.Reader) (tenantQuotaRequest, error) {
	var req tenantQuotaRequest
	dec := json.NewDecoder(body)
	if err := dec.Decode(&req); err != nil {
		return req, err
	}
	if err := dec.Decode(new(json.RawMessage)); err != io.EOF {
		return req, errors.New("data after the JSON object")
	}
	return req, nil
}

// adminError is the JSON body of a refused admin request.
type adminError struct {
	ErrorCode int32  `json:"error_code"`
	Error     string `json:"error"`
}

// tenantStatus is the HTTP status of a tenant operation's result.
func tenantStatus(code kvstore.ErrorCode) int {
	switch code {
	case kvstore.OK:
		return http.StatusOK
	case kvstore.TenantNotRegistered:
		return http.StatusNotFound
	case kvstore.TenantNotEmpty:
		return http.StatusConflict
	}
	return http.StatusBadRequest
}

func writeAdminError(w http.ResponseWriter, code kvstore.ErrorCode, msg string) {
	if msg == "" {
		msg = code.String()
	}
	writeJSON(w, tenantStatus(code), adminError{ErrorCode: int32(code), Error: msg})
}

// handleTenantQuotas serves the tenant quota policy (upstream's
// /api/v1/tenant_quotas on the metrics port):
//
//	GET    /api/v1/tenant_quotas              {"tenants": [TenantInfo...]}
//	GET    /api/v1/tenant_quotas?tenant_id=T  TenantInfo, 404 if T is not registered
//	PUT    /api/v1/tenant_quotas              body {"tenant_id": T, "quota_bytes": N}: register T
//	                                          or set its quota (0: no limit); answers TenantInfo
//	DELETE /api/v1/tenant_quotas?tenant_id=T  unregister T: 409 while it holds objects
//
// Refusals answer {"error_code": N, "error": "..."} with 400 (bad id or
// body), 404 (TENANT_NOT_REGISTERED) or 409 (TENANT_NOT_EMPTY).
//
// With tenant tokens configured (TenantTokens), every request needs the
// admin token, except a GET of one tenant, which that tenant's own token
// also may read; others get 401. Without tokens, a PUT or DELETE is served
// only to loopback callers unless --admin_allow_remote (403 otherwise).
func (s *Server) handleTenantQuotas(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("tenant_id")
	reader := ""
	if r.Method == http.MethodGet && r.URL.Query().Has("tenant_id") {
		if t, code := s.opts.Config.ResolveTenant(id); code == kvstore.OK {
			reader = t
		}
	}
	if r.Method == http.MethodPut || r.Method == http.MethodDelete {
		if !s.authorizeChange(w, r) {
			return
		}
	} else if !s.authorizeAdmin(w, r, reader) {
		return
	}
	switch r.Method {
	case http.MethodGet:
		if !r.URL.Query().Has("tenant_id") {
			var all []TenantInfo
			s.WithState(func(st *State, _ time.Time) { all = st.Tenants() })
			writeJSON(w, http.StatusOK, map[string][]TenantInfo{"tenants": all})
			return
		}
		var info TenantInfo
		var code kvstore.ErrorCode
		s.WithState(func(st *State, _ time.Time) { info, code = st.Tenant(id) })
		if code != kvstore.OK {
			writeAdminError(w, code, "")
			return
		}
		writeJSON(w, http.StatusOK, info)
	case http.MethodPut:
		req, err := decodeTenantQuota(http.MaxBytesReader(w, r.Body, 1<<16))
		if err != nil {
			writeAdminError(w, kvstore.InvalidParams, "body must be JSON {\"tenant_id\": ..., \"quota_bytes\": N}: "+err.Error())
			return
		}
		if req.QuotaBytes == nil {
			writeAdminError(w, kvstore.InvalidParams, "quota_bytes is required (0 for no limit)")
			return
		}
		if *req.QuotaBytes == 0 && s.opts.TenantPolicyFile != "" {
			writeAdminError(w, kvstore.InvalidParams, "quota_bytes must be positive: the tenant quota policy file holds no unlimited tenant")
			return
		}
		prev, had := s.tenantBefore(req.TenantID)
		var info TenantInfo
		var code kvstore.ErrorCode
		s.changeState(replication.KindTenantQuotaSet, req.TenantID, binary.AppendUvarint(nil, *req.QuotaBytes), func(st *State) {
			if code = st.SetTenantQuota(req.TenantID, *req.QuotaBytes); code == kvstore.OK {
				info, code = st.Tenant(req.TenantID)
			}
		}, &code)
		if code != kvstore.OK {
			writeAdminError(w, code, "")
			return
		}
		if !s.persistTenantPolicy(w, func(st *State) {
			if had {
				st.SetTenantQuota(req.TenantID, prev.QuotaBytes)
			} else {
				st.DeleteTenantQuota(req.TenantID)
			}
		}) {
			return
		}
		s.log.Info("tenant quota set", "tenant_id", info.ID, "quota_bytes", info.QuotaBytes)
		writeJSON(w, http.StatusOK, info)
	case http.MethodDelete:
		if id == "" {
			writeAdminError(w, kvstore.InvalidParams, "tenant_id is required")
			return
		}
		prev, _ := s.tenantBefore(id)
		var code kvstore.ErrorCode
		s.changeState(replication.KindTenantQuotaDelete, id, nil, func(st *State) { code = st.DeleteTenantQuota(id) }, &code)
		if code != kvstore.OK {
			writeAdminError(w, code, "")
			return
		}
		if !s.persistTenantPolicy(w, func(st *State) { st.SetTenantQuota(id, prev.QuotaBytes) }) {
			return
		}
		s.log.Info("tenant unregistered", "tenant_id", id)
		writeJSON(w, http.StatusOK, map[string]string{"tenant_id": id, "status": "deleted"})
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// tenantBefore is tenant id's registration before a change, and whether
// it was registered.
func (s *Server) tenantBefore(id string) (TenantInfo, bool) {
	var info TenantInfo
	var code kvstore.ErrorCode
	s.WithState(func(st *State, _ time.Time) { info, code = st.Tenant(id) })
	return info, code == kvstore.OK
}

// persistTenantPolicy writes the policy file after a quota change, when
// there is one. If it cannot, the change is undone and a 500 answered:
// the file and the master never disagree. (A policy file means a master
// without HA, so the change is undone directly.)
func (s *Server) persistTenantPolicy(w http.ResponseWriter, undo func(st *State)) bool {
	if s.opts.TenantPolicyFile == "" {
		return true
	}
	err := s.saveTenantPolicy()
	if err == nil {
		return true
	}
	s.WithState(func(st *State, _ time.Time) { undo(st) })
	s.log.Error("tenant quota change undone: the policy file was not written", "err", err)
	writeJSON(w, http.StatusInternalServerError, adminError{ErrorCode: int32(kvstore.InternalError), Error: err.Error()})
	return false
}

// adminTenant is the tenant an admin key query names (?tenant_id=, the
// default tenant when absent), or a 400 (bad id) or 401 (with tenant
// tokens, neither the admin's nor that tenant's token) already written.
func (s *Server) adminTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	t, code := s.opts.Config.ResolveTenant(r.URL.Query().Get("tenant_id"))
	if code != kvstore.OK {
		if s.authorizeAdmin(w, r, "") {
			writeAdminError(w, code, "invalid tenant_id "+strconv.Quote(r.URL.Query().Get("tenant_id")))
		}
		return "", false
	}
	return t, s.authorizeAdmin(w, r, t)
}
