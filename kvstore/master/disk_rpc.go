package master

import (
	"context"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// This file translates the DiskTier RPCs to State calls; it holds no
// logic. Keys travel tenant-qualified: a storage client stores and
// announces the object keys the master gives it.

// diskServer serves masterpb.DiskTierServer for a Server.
type diskServer struct {
	masterpb.UnimplementedDiskTierServer
	s *Server
}

// MountLocalDiskSegment implements masterpb.DiskTierServer.
func (d diskServer) MountLocalDiskSegment(ctx context.Context, req *masterpb.MountLocalDiskSegmentRequest) (*masterpb.MountLocalDiskSegmentResponse, error) {
	objs := make([]DiskObject, len(req.GetObjects()))
	for i, o := range req.GetObjects() {
		objs[i] = DiskObject{Key: o.GetKey(), Size: o.GetSize()}
	}
	resp := &masterpb.MountLocalDiskSegmentResponse{}
	refuse := func(c kvstore.ErrorCode) { resp.ErrorCode = code32(c) }
	err := d.s.doAs(d.s.caller(ctx), req.GetClientId(), refuse, func(st *State, now time.Time) {
		rejected, code := st.MountLocalDisk(req.GetClientId(), req.GetEndpoint(), req.GetCapacityBytes(), objs, now)
		resp.ErrorCode = code32(code)
		for _, i := range rejected {
			resp.Rejected = append(resp.Rejected, uint32(i))
		}
	})
	return resp, err
}

// UnmountLocalDiskSegment implements masterpb.DiskTierServer.
func (d diskServer) UnmountLocalDiskSegment(ctx context.Context, req *masterpb.UnmountLocalDiskSegmentRequest) (*masterpb.StatusResponse, error) {
	var code kvstore.ErrorCode
	err := d.s.doAs(d.s.caller(ctx), req.GetClientId(), func(c kvstore.ErrorCode) { code = c }, func(st *State, now time.Time) {
		code = st.UnmountLocalDisk(req.GetClientId(), now)
	})
	return &masterpb.StatusResponse{ErrorCode: code32(code)}, err
}

// OffloadHeartbeat implements masterpb.DiskTierServer.
func (d diskServer) OffloadHeartbeat(ctx context.Context, req *masterpb.OffloadHeartbeatRequest) (*masterpb.OffloadHeartbeatResponse, error) {
	resp := &masterpb.OffloadHeartbeatResponse{}
	refuse := func(c kvstore.ErrorCode) { resp.ErrorCode = code32(c) }
	err := d.s.doAs(d.s.caller(ctx), req.GetClientId(), refuse, func(st *State, now time.Time) {
		w, code := st.OffloadHeartbeat(req.GetClientId(), req.GetDropped(), now)
		resp.ErrorCode = code32(code)
		for _, o := range w.Offloads {
			resp.Offload = append(resp.Offload, &masterpb.OffloadTask{Key: o.Key, Size: o.Size, Source: toPBReplicas([]Replica{o.Source})[0]})
		}
		for _, p := range w.Promotions {
			resp.Promotions = append(resp.Promotions, &masterpb.PromotionTask{Key: p.Key, Size: p.Size, Target: toPBReplicas([]Replica{p.Target})[0]})
		}
		resp.Deletes = w.Deletes
	})
	return resp, err
}

// NotifyOffloadResult implements masterpb.DiskTierServer.
func (d diskServer) NotifyOffloadResult(ctx context.Context, req *masterpb.NotifyOffloadResultRequest) (*masterpb.BatchStatusResponse, error) {
	resp := &masterpb.BatchStatusResponse{}
	refuse := func(c kvstore.ErrorCode) {
		for range req.GetResults() {
			resp.ErrorCodes = append(resp.ErrorCodes, code32(c))
		}
	}
	err := d.s.doAs(d.s.caller(ctx), req.GetClientId(), refuse, func(st *State, now time.Time) {
		for _, r := range req.GetResults() {
			resp.ErrorCodes = append(resp.ErrorCodes, code32(st.NotifyOffload(req.GetClientId(), r.GetKey(), r.GetSuccess(), now)))
		}
	})
	return resp, err
}

// NotifyPromotionResult implements masterpb.DiskTierServer.
func (d diskServer) NotifyPromotionResult(ctx context.Context, req *masterpb.NotifyPromotionResultRequest) (*masterpb.StatusResponse, error) {
	var code kvstore.ErrorCode
	err := d.s.doAs(d.s.caller(ctx), req.GetClientId(), func(c kvstore.ErrorCode) { code = c }, func(st *State, now time.Time) {
		code = st.NotifyPromotion(req.GetClientId(), req.GetKey(), req.GetReplicaId(), req.GetSuccess(), now)
	})
	return &masterpb.StatusResponse{ErrorCode: code32(code)}, err
}
