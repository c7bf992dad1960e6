package master

import (
	"context"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// This file translates the Master RPCs to State calls; it holds no logic.

// scope is the tenant namespace one request works in: the tenant id its
// gRPC metadata carries (kvstore.TenantMetadataKey), resolved by the
// configuration. code is not OK for an id the master refuses, or, with
// tenant tokens configured, when the call lacks that tenant's token
// (kvstore.TenantTokenMetadataKey; ILLEGAL_CLIENT); every key of the
// request then fails with it.
type scope struct {
	cfg    Config
	tenant string
	ns     string // the namespace's key prefix (kvstore.Namespace.KeyPrefix)
	code   kvstore.ErrorCode
}

func (s *Server) scope(ctx context.Context) scope {
	var id string
	if v := metadata.ValueFromIncomingContext(ctx, kvstore.TenantMetadataKey); len(v) > 0 {
		id = v[0]
	}
	t, code := s.opts.Config.ResolveTenant(id)
	if code == kvstore.OK && s.opts.TenantTokens != nil && !isReplay(ctx) {
		var tok string
		if v := metadata.ValueFromIncomingContext(ctx, kvstore.TenantTokenMetadataKey); len(v) > 0 {
			tok = v[0]
		}
		if !s.opts.TenantTokens.allowTenant(t, tok) {
			code = kvstore.IllegalClient
		}
	}
	sc := scope{cfg: s.opts.Config, tenant: t, code: code}
	if v := metadata.ValueFromIncomingContext(ctx, kvstore.NamespaceMetadataKey); len(v) > 0 && code == kvstore.OK {
		ns, err := kvstore.ParseNamespace(v[0])
		sc.ns, sc.code = ns.KeyPrefix(), kvstore.CodeOf(err)
	}
	return sc
}

// key is the object key of the caller's key k.
func (sc scope) key(k string) string { return sc.cfg.ObjectKey(sc.tenant, sc.ns+k) }

// or is the scope's refusal, or else what op returns.
func (sc scope) or(op func() kvstore.ErrorCode) kvstore.ErrorCode {
	if sc.code != kvstore.OK {
		return sc.code
	}
	return op()
}

// toConfig is the write configuration of a put request.
func toConfig(req *masterpb.PutStartRequest) ReplicateConfig {
	c := req.GetConfig()
	if c == nil {
		return ReplicateConfig{ReplicaNum: 1, GroupID: req.GetGroupId()}
	}
	rc := ReplicateConfig{
		ReplicaNum: int(c.GetReplicaNum()), SoftPin: SoftPinAction(c.GetSoftPinAction()),
		HardPin: c.GetWithHardPin(), PreferredSegments: c.GetPreferredSegments(),
		PreferSameNode: c.GetPreferAllocInSameNode(), HostID: c.GetHostId(),
		DataType: int(c.GetDataType()), GroupID: req.GetGroupId(),
		PreferLocal:     c.GetPreferLocal(),
		PreferredOwners: c.GetPreferredOwners(), RouteTopK: int(c.GetRouteTopk()),
	}
	if c.SoftPinTtlMs != nil {
		d := time.Duration(c.GetSoftPinTtlMs()) * time.Millisecond
		rc.SoftPinTTL = &d
	}
	return rc
}

func toPBReplicas(rs []Replica) []*masterpb.ReplicaDescriptor {
	out := make([]*masterpb.ReplicaDescriptor, len(rs))
	for i, r := range rs {
		out[i] = &masterpb.ReplicaDescriptor{
			Id: r.ID, Status: masterpb.ReplicaStatus(r.Status), TransportEndpoint: r.Endpoint,
			BufferAddress: r.Address, Size: r.Size, SegmentName: r.SegmentName,
			ReplicaType: masterpb.ReplicaType(r.Type), DiskClientId: r.DiskClient, DiskObjectKey: r.DiskKey,
			FilePath: r.FilePath,
		}
	}
	return out
}

func toSegment(p *masterpb.Segment) Segment {
	return Segment{
		ID: p.GetId(), Name: p.GetName(), Base: p.GetBase(), Size: p.GetSize(),
		TEEndpoint: p.GetTeEndpoint(), Protocol: p.GetProtocol(), HostID: p.GetHostId(),
		HighWatermark: int(p.GetEvictionHighWatermarkPercent()), LowWatermark: int(p.GetEvictionLowWatermarkPercent()),
		Incarnation: p.GetIncarnation(),
	}
}

func code32(c kvstore.ErrorCode) int32 { return int32(c) }

// refuseStatus sets *resp to a StatusResponse carrying a refusal.
func refuseStatus(resp **masterpb.StatusResponse) func(kvstore.ErrorCode) {
	return func(c kvstore.ErrorCode) { *resp = &masterpb.StatusResponse{ErrorCode: code32(c)} }
}

func putStartResp(rs []Replica, code kvstore.ErrorCode) *masterpb.PutStartResponse {
	return &masterpb.PutStartResponse{ErrorCode: code32(code), Replicas: toPBReplicas(rs)}
}

func getResp(res ReadResult, code kvstore.ErrorCode) *masterpb.GetReplicaListResponse {
	r := &masterpb.GetReplicaListResponse{ErrorCode: code32(code)}
	if code == kvstore.OK {
		r.Replicas = toPBReplicas(res.Replicas)
		r.LeaseTtlMs = uint64(res.LeaseTTL / time.Millisecond)
		r.Checksum = res.Checksum
	}
	return r
}

// PutStart implements masterpb.MasterServer.
func (s *Server) PutStart(ctx context.Context, req *masterpb.PutStartRequest) (*masterpb.PutStartResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return putStartResp(nil, sc.code), nil
	}
	var resp *masterpb.PutStartResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), func(c kvstore.ErrorCode) { resp = putStartResp(nil, c) }, func(st *State, now time.Time) {
		resp = putStartResp(st.PutStart(req.GetClientId(), sc.key(req.GetKey()), req.GetSize(), toConfig(req), now))
	})
	return resp, err
}

// UpsertStart implements masterpb.MasterServer.
func (s *Server) UpsertStart(ctx context.Context, req *masterpb.PutStartRequest) (*masterpb.PutStartResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return putStartResp(nil, sc.code), nil
	}
	var resp *masterpb.PutStartResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), func(c kvstore.ErrorCode) { resp = putStartResp(nil, c) }, func(st *State, now time.Time) {
		resp = putStartResp(st.UpsertStart(req.GetClientId(), sc.key(req.GetKey()), req.GetSize(), toConfig(req), now))
	})
	return resp, err
}

// PutEnd implements masterpb.MasterServer.
func (s *Server) PutEnd(ctx context.Context, req *masterpb.PutEndRequest) (*masterpb.StatusResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.StatusResponse{ErrorCode: code32(sc.code)}, nil
	}
	var resp *masterpb.StatusResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuseStatus(&resp), func(st *State, now time.Time) {
		resp = &masterpb.StatusResponse{ErrorCode: code32(endWrite(st, req, sc.key(req.GetKey()), now))}
	})
	return resp, err
}

// PutRevoke implements masterpb.MasterServer.
func (s *Server) PutRevoke(ctx context.Context, req *masterpb.PutRevokeRequest) (*masterpb.StatusResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.StatusResponse{ErrorCode: code32(sc.code)}, nil
	}
	var resp *masterpb.StatusResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuseStatus(&resp), func(st *State, now time.Time) {
		resp = &masterpb.StatusResponse{ErrorCode: code32(revokeWrite(st, req, sc.key(req.GetKey()), now))}
	})
	return resp, err
}

// BatchPutStart implements masterpb.MasterServer: PutStart per item.
func (s *Server) BatchPutStart(ctx context.Context, req *masterpb.BatchPutStartRequest) (*masterpb.BatchPutStartResponse, error) {
	resp := &masterpb.BatchPutStartResponse{}
	sc, who := s.scope(ctx), s.caller(ctx)
	err := s.do(func(st *State, now time.Time) {
		st.CountRequest("batch_put_start")
		for _, it := range req.GetItems() {
			if code := sc.or(func() kvstore.ErrorCode { return st.admit(it.GetClientId(), who) }); code != kvstore.OK {
				resp.Items = append(resp.Items, putStartResp(nil, code))
				continue
			}
			resp.Items = append(resp.Items, putStartResp(st.PutStart(it.GetClientId(), sc.key(it.GetKey()), it.GetSize(), toConfig(it), now)))
		}
	})
	return resp, err
}

// BatchUpsertStart implements masterpb.MasterServer: UpsertStart per item.
func (s *Server) BatchUpsertStart(ctx context.Context, req *masterpb.BatchPutStartRequest) (*masterpb.BatchPutStartResponse, error) {
	resp := &masterpb.BatchPutStartResponse{}
	sc, who := s.scope(ctx), s.caller(ctx)
	err := s.do(func(st *State, now time.Time) {
		st.CountRequest("batch_upsert_start")
		for _, it := range req.GetItems() {
			if code := sc.or(func() kvstore.ErrorCode { return st.admit(it.GetClientId(), who) }); code != kvstore.OK {
				resp.Items = append(resp.Items, putStartResp(nil, code))
				continue
			}
			resp.Items = append(resp.Items, putStartResp(st.UpsertStart(it.GetClientId(), sc.key(it.GetKey()), it.GetSize(), toConfig(it), now)))
		}
	})
	return resp, err
}

// BatchPutEnd implements masterpb.MasterServer: PutEnd per item.
func (s *Server) BatchPutEnd(ctx context.Context, req *masterpb.BatchPutEndRequest) (*masterpb.BatchStatusResponse, error) {
	resp := &masterpb.BatchStatusResponse{}
	sc, who := s.scope(ctx), s.caller(ctx)
	err := s.do(func(st *State, now time.Time) {
		st.CountRequest("batch_put_end")
		for _, it := range req.GetItems() {
			resp.ErrorCodes = append(resp.ErrorCodes, code32(sc.or(func() kvstore.ErrorCode {
				if code := st.admit(it.GetClientId(), who); code != kvstore.OK {
					return code
				}
				return endWrite(st, it, sc.key(it.GetKey()), now)
			})))
		}
	})
	return resp, err
}

// BatchPutRevoke implements masterpb.MasterServer: PutRevoke per item.
func (s *Server) BatchPutRevoke(ctx context.Context, req *masterpb.BatchPutRevokeRequest) (*masterpb.BatchStatusResponse, error) {
	resp := &masterpb.BatchStatusResponse{}
	sc, who := s.scope(ctx), s.caller(ctx)
	err := s.do(func(st *State, now time.Time) {
		st.CountRequest("batch_put_revoke")
		for _, it := range req.GetItems() {
			resp.ErrorCodes = append(resp.ErrorCodes, code32(sc.or(func() kvstore.ErrorCode {
				if code := st.admit(it.GetClientId(), who); code != kvstore.OK {
					return code
				}
				return revokeWrite(st, it, sc.key(it.GetKey()), now)
			})))
		}
	})
	return resp, err
}

// Reserve implements masterpb.MasterServer (reservations.go).
func (s *Server) Reserve(ctx context.Context, req *masterpb.ReserveRequest) (*masterpb.ReserveResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.ReserveResponse{ErrorCode: code32(sc.code)}, nil
	}
	var resp *masterpb.ReserveResponse
	refuse := func(c kvstore.ErrorCode) { resp = &masterpb.ReserveResponse{ErrorCode: code32(c)} }
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuse, func(st *State, now time.Time) {
		r, code := st.Reserve(req.GetClientId(), sc.tenant, req.GetSize(), req.GetRelease(), now)
		resp = &masterpb.ReserveResponse{ErrorCode: code32(code)}
		if code == kvstore.OK && r.ID != 0 {
			resp.ReservationId = r.ID
			resp.Block = toPBReplicas([]Replica{r.Block})[0]
		}
	})
	return resp, err
}

// BatchPutCommit implements masterpb.MasterServer: PutCommit per item.
func (s *Server) BatchPutCommit(ctx context.Context, req *masterpb.BatchPutCommitRequest) (*masterpb.BatchPutCommitResponse, error) {
	resp := &masterpb.BatchPutCommitResponse{}
	sc, who := s.scope(ctx), s.caller(ctx)
	err := s.do(func(st *State, now time.Time) {
		st.CountRequest("batch_put_commit")
		for _, it := range req.GetItems() {
			code, gone := sc.code, false
			if code == kvstore.OK {
				code = st.admit(it.GetPut().GetClientId(), who)
			}
			if p := it.GetPut(); code == kvstore.OK {
				code, gone = st.PutCommit(p.GetClientId(), sc.key(p.GetKey()), p.GetSize(),
					it.GetReservationId(), it.GetOffset(), it.Checksum, toConfig(p), now)
			}
			resp.ErrorCodes = append(resp.ErrorCodes, code32(code))
			resp.ReservationGone = append(resp.ReservationGone, gone)
		}
	})
	return resp, err
}

// GetReplicaList implements masterpb.MasterServer.
func (s *Server) GetReplicaList(ctx context.Context, req *masterpb.KeyRequest) (*masterpb.GetReplicaListResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return getResp(ReadResult{}, sc.code), nil
	}
	var resp *masterpb.GetReplicaListResponse
	err := s.do(func(st *State, now time.Time) { resp = getResp(st.GetReplicaList(sc.key(req.GetKey()), now)) })
	return resp, err
}

// BatchGetReplicaList implements masterpb.MasterServer.
func (s *Server) BatchGetReplicaList(ctx context.Context, req *masterpb.BatchKeyRequest) (*masterpb.BatchGetReplicaListResponse, error) {
	resp := &masterpb.BatchGetReplicaListResponse{}
	sc := s.scope(ctx)
	err := s.do(func(st *State, now time.Time) {
		st.CountRequest("batch_get_replica_list")
		for _, k := range req.GetKeys() {
			if sc.code != kvstore.OK {
				resp.Items = append(resp.Items, getResp(ReadResult{}, sc.code))
				continue
			}
			resp.Items = append(resp.Items, getResp(st.GetReplicaList(sc.key(k), now)))
		}
	})
	return resp, err
}

// ExistKey implements masterpb.MasterServer.
func (s *Server) ExistKey(ctx context.Context, req *masterpb.KeyRequest) (*masterpb.ExistKeyResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.ExistKeyResponse{ErrorCode: code32(sc.code)}, nil
	}
	var resp *masterpb.ExistKeyResponse
	err := s.do(func(st *State, now time.Time) {
		ok, code := st.ExistKey(sc.key(req.GetKey()), now)
		resp = &masterpb.ExistKeyResponse{ErrorCode: code32(code), Exists: ok}
	})
	return resp, err
}

// BatchExistKey implements masterpb.MasterServer.
func (s *Server) BatchExistKey(ctx context.Context, req *masterpb.BatchKeyRequest) (*masterpb.BatchExistKeyResponse, error) {
	keys := req.GetKeys()
	// The items are allocated together, outside the state's lock: one
	// allocation for a batch instead of one per key.
	items := make([]masterpb.ExistKeyResponse, len(keys))
	resp := &masterpb.BatchExistKeyResponse{Items: make([]*masterpb.ExistKeyResponse, len(keys))}
	for i := range items {
		resp.Items[i] = &items[i]
	}
	err := s.batchExist(ctx, keys, func(i int, ok bool, code kvstore.ErrorCode) {
		items[i].ErrorCode, items[i].Exists = code32(code), ok
	})
	return resp, err
}

// BatchExistCodes implements masterpb.MasterServer: BatchExistKey's
// answer as one code per key (1 exists, 0 not, negative an error code).
func (s *Server) BatchExistCodes(ctx context.Context, req *masterpb.BatchKeyRequest) (*masterpb.ExistCodesResponse, error) {
	codes := make([]int32, len(req.GetKeys()))
	err := s.batchExist(ctx, req.GetKeys(), func(i int, ok bool, code kvstore.ErrorCode) {
		switch {
		case code != kvstore.OK:
			codes[i] = code32(code)
		case ok:
			codes[i] = 1
		}
	})
	return &masterpb.ExistCodesResponse{Codes: codes}, err
}

// batchExist looks every key up (granting read leases, as upstream) and
// reports each one's answer to set, by index.
func (s *Server) batchExist(ctx context.Context, keys []string, set func(i int, ok bool, code kvstore.ErrorCode)) error {
	sc := s.scope(ctx)
	return s.do(func(st *State, now time.Time) {
		st.CountRequest("batch_exist_key")
		for i, k := range keys {
			if sc.code != kvstore.OK {
				set(i, false, sc.code)
				continue
			}
			ok, code := st.ExistKey(sc.key(k), now)
			set(i, ok, code)
		}
	})
}

// Remove implements masterpb.MasterServer.
func (s *Server) Remove(ctx context.Context, req *masterpb.RemoveRequest) (*masterpb.StatusResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.StatusResponse{ErrorCode: code32(sc.code)}, nil
	}
	var resp *masterpb.StatusResponse
	err := s.do(func(st *State, now time.Time) {
		resp = &masterpb.StatusResponse{ErrorCode: code32(st.Remove(sc.key(req.GetKey()), req.GetForce(), now))}
	})
	return resp, err
}

// BatchRemove implements masterpb.MasterServer.
func (s *Server) BatchRemove(ctx context.Context, req *masterpb.BatchRemoveRequest) (*masterpb.BatchStatusResponse, error) {
	resp := &masterpb.BatchStatusResponse{}
	sc := s.scope(ctx)
	err := s.do(func(st *State, now time.Time) {
		st.CountRequest("batch_remove")
		keys := make([]string, len(req.GetKeys()))
		for i, k := range req.GetKeys() {
			keys[i] = sc.key(k)
		}
		codes := make([]kvstore.ErrorCode, len(keys))
		if sc.code == kvstore.OK {
			codes = st.BatchRemove(keys, req.GetForce(), now)
		}
		for _, c := range codes {
			resp.ErrorCodes = append(resp.ErrorCodes, code32(sc.or(func() kvstore.ErrorCode { return c })))
		}
	})
	return resp, err
}

// RemoveByRegex implements masterpb.MasterServer.
func (s *Server) RemoveByRegex(ctx context.Context, req *masterpb.RemoveByRegexRequest) (*masterpb.CountResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.CountResponse{ErrorCode: code32(sc.code)}, nil
	}
	var resp *masterpb.CountResponse
	err := s.do(func(st *State, now time.Time) {
		n, code := st.RemoveByRegex(sc.tenant, sc.ns, req.GetPattern(), req.GetForce(), now)
		resp = &masterpb.CountResponse{ErrorCode: code32(code), Count: n}
	})
	return resp, err
}

// RemoveAll implements masterpb.MasterServer.
func (s *Server) RemoveAll(ctx context.Context, req *masterpb.RemoveAllRequest) (*masterpb.CountResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.CountResponse{ErrorCode: code32(sc.code)}, nil
	}
	var resp *masterpb.CountResponse
	err := s.do(func(st *State, now time.Time) {
		resp = &masterpb.CountResponse{Count: st.RemoveAll(sc.tenant, sc.ns, req.GetForce(), now)}
	})
	return resp, err
}

// MountSegment implements masterpb.MasterServer.
func (s *Server) MountSegment(ctx context.Context, req *masterpb.MountSegmentRequest) (*masterpb.StatusResponse, error) {
	var resp *masterpb.StatusResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuseStatus(&resp), func(st *State, now time.Time) {
		resp = &masterpb.StatusResponse{ErrorCode: code32(st.MountSegment(req.GetClientId(), toSegment(req.GetSegment()), now))}
	})
	return resp, err
}

// ReMountSegment implements masterpb.MasterServer.
func (s *Server) ReMountSegment(ctx context.Context, req *masterpb.ReMountSegmentRequest) (*masterpb.StatusResponse, error) {
	segs := make([]Segment, len(req.GetSegments()))
	for i, p := range req.GetSegments() {
		segs[i] = toSegment(p)
	}
	var resp *masterpb.StatusResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuseStatus(&resp), func(st *State, now time.Time) {
		resp = &masterpb.StatusResponse{ErrorCode: code32(st.ReMountSegment(req.GetClientId(), segs, now))}
	})
	return resp, err
}

// UnmountSegment implements masterpb.MasterServer.
func (s *Server) UnmountSegment(ctx context.Context, req *masterpb.UnmountSegmentRequest) (*masterpb.StatusResponse, error) {
	var resp *masterpb.StatusResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuseStatus(&resp), func(st *State, now time.Time) {
		resp = &masterpb.StatusResponse{ErrorCode: code32(st.UnmountSegment(req.GetClientId(), req.GetSegmentId(), now))}
	})
	return resp, err
}

// DrainSegment implements masterpb.MasterServer.
func (s *Server) DrainSegment(ctx context.Context, req *masterpb.UnmountSegmentRequest) (*masterpb.StatusResponse, error) {
	var resp *masterpb.StatusResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuseStatus(&resp), func(st *State, now time.Time) {
		resp = &masterpb.StatusResponse{ErrorCode: code32(st.DrainSegment(req.GetClientId(), req.GetSegmentId(), now))}
	})
	return resp, err
}

// Ping implements masterpb.MasterServer; the answer carries the copy and
// move tasks newly assigned to the client.
func (s *Server) Ping(ctx context.Context, req *masterpb.PingRequest) (*masterpb.PingResponse, error) {
	var resp *masterpb.PingResponse
	refuse := func(c kvstore.ErrorCode) {
		resp = &masterpb.PingResponse{ErrorCode: code32(c), ViewVersion: s.view.Load()}
	}
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuse, func(st *State, now time.Time) {
		cs, code := st.Ping(req.GetClientId(), req.GetIncarnation(), now)
		resp = &masterpb.PingResponse{ErrorCode: code32(code), ViewVersion: s.view.Load(), ClientStatus: masterpb.ClientStatus(cs)}
		if code == kvstore.OK {
			resp.Tasks = toPBAssignments(st.FetchTasks(req.GetClientId(), now))
		}
	})
	return resp, err
}
