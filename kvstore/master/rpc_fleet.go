package master

import (
	"context"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// This file translates the fleet RPCs (segment modes, evacuation, handoff
// plans) to State calls; it holds no logic.

// userKey returns the caller's form of objectKey when the key lies in the
// caller's tenant and namespace.
func (sc scope) userKey(st *State, objectKey string) (string, bool) {
	tenant, k := st.splitKey(objectKey)
	if tenant != sc.tenant {
		return "", false
	}
	return kvstore.InNamespace(k, sc.ns)
}

// SetSegmentMode implements masterpb.MasterServer.
func (s *Server) SetSegmentMode(ctx context.Context, req *masterpb.SetSegmentModeRequest) (*masterpb.StatusResponse, error) {
	var resp *masterpb.StatusResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuseStatus(&resp), func(st *State, now time.Time) {
		code := st.SetSegmentMode(req.GetClientId(), req.GetSegmentId(), SegmentMode(req.GetMode()), now)
		resp = &masterpb.StatusResponse{ErrorCode: code32(code)}
	})
	return resp, err
}

// EvacuateSegment implements masterpb.MasterServer.
func (s *Server) EvacuateSegment(ctx context.Context, req *masterpb.UnmountSegmentRequest) (*masterpb.EvacuateSegmentResponse, error) {
	var resp *masterpb.EvacuateSegmentResponse
	refuse := func(c kvstore.ErrorCode) { resp = &masterpb.EvacuateSegmentResponse{ErrorCode: code32(c)} }
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuse, func(st *State, now time.Time) {
		ev, code := st.EvacuateSegment(req.GetClientId(), req.GetSegmentId(), now)
		resp = &masterpb.EvacuateSegmentResponse{
			ErrorCode: code32(code), Remaining: uint32(ev.Remaining), Moving: uint32(ev.Moving),
			Started: uint32(ev.Started), Dropped: uint32(ev.Dropped), Unplaceable: uint32(ev.Unplaceable),
			Quarantined: uint32(ev.Quarantined),
		}
	})
	return resp, err
}

// PlanHandoff implements masterpb.MasterServer: items for the caller's
// keys, totals over all.
func (s *Server) PlanHandoff(ctx context.Context, req *masterpb.PlanHandoffRequest) (*masterpb.PlanHandoffResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.PlanHandoffResponse{ErrorCode: code32(sc.code)}, nil
	}
	var resp *masterpb.PlanHandoffResponse
	refuse := func(c kvstore.ErrorCode) { resp = &masterpb.PlanHandoffResponse{ErrorCode: code32(c)} }
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuse, func(st *State, now time.Time) {
		items, code := st.PlanHandoff(req.GetClientId(), req.GetSegmentIds())
		resp = &masterpb.PlanHandoffResponse{ErrorCode: code32(code)}
		seen := map[string]bool{}
		for _, it := range items {
			if !seen[it.Key] {
				seen[it.Key] = true
				resp.Objects++
				resp.Bytes += it.Size
			}
			if it.To == nil && it.OtherReplicas == 0 {
				resp.Unplaceable++
			}
			k, mine := sc.userKey(st, it.Key)
			if !mine {
				continue
			}
			pi := &masterpb.HandoffItem{Key: k, Size: it.Size, FromSegment: it.From.ID, OtherReplicas: uint32(it.OtherReplicas)}
			if it.To != nil {
				pi.ToSegment, pi.ToOwner = it.To.ID, it.To.Name
			}
			resp.Items = append(resp.Items, pi)
		}
	})
	return resp, err
}
