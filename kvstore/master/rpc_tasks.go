package master

import (
	"context"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// This file translates the replica-management RPCs (BatchReplicaClear,
// copy and move tasks) to State calls; it holds no logic.

func toPBTaskID(id TaskID) *masterpb.TaskId { return &masterpb.TaskId{Hi: id.Hi, Lo: id.Lo} }

func fromPBTaskID(id *masterpb.TaskId) TaskID { return TaskID{Hi: id.GetHi(), Lo: id.GetLo()} }

func msEpoch(t time.Time) uint64 { return uint64(t.UnixMilli()) }

func toPBAssignments(ts []TaskAssignment) []*masterpb.TaskAssignment {
	out := make([]*masterpb.TaskAssignment, len(ts))
	for i, t := range ts {
		out[i] = &masterpb.TaskAssignment{
			Id: toPBTaskID(t.ID), Type: masterpb.TaskType(t.Type), Size: t.Size,
			Source: toPBReplicas([]Replica{t.Source})[0], Targets: toPBReplicas(t.Targets),
		}
	}
	return out
}

// BatchReplicaClear implements masterpb.MasterServer.
func (s *Server) BatchReplicaClear(ctx context.Context, req *masterpb.BatchReplicaClearRequest) (*masterpb.BatchReplicaClearResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.BatchReplicaClearResponse{ErrorCode: code32(sc.code)}, nil
	}
	keys := make([]string, len(req.GetKeys()))
	for i, k := range req.GetKeys() {
		if k != "" {
			keys[i] = sc.key(k)
		}
	}
	resp := &masterpb.BatchReplicaClearResponse{}
	refuse := func(c kvstore.ErrorCode) { resp.ErrorCode = code32(c) }
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuse, func(st *State, now time.Time) {
		for _, i := range st.BatchReplicaClear(req.GetClientId(), keys, req.GetSegmentName(), now) {
			resp.Cleared = append(resp.Cleared, uint32(i))
		}
	})
	return resp, err
}

func taskResp(id TaskID, code kvstore.ErrorCode) *masterpb.CreateTaskResponse {
	return &masterpb.CreateTaskResponse{ErrorCode: code32(code), Id: toPBTaskID(id)}
}

// CreateCopyTask implements masterpb.MasterServer.
func (s *Server) CreateCopyTask(ctx context.Context, req *masterpb.CreateCopyTaskRequest) (*masterpb.CreateTaskResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return taskResp(TaskID{}, sc.code), nil
	}
	var resp *masterpb.CreateTaskResponse
	err := s.do(func(st *State, now time.Time) {
		resp = taskResp(st.CreateCopyTask(sc.key(req.GetKey()), req.GetTargets(), now))
	})
	return resp, err
}

// CreateMoveTask implements masterpb.MasterServer.
func (s *Server) CreateMoveTask(ctx context.Context, req *masterpb.CreateMoveTaskRequest) (*masterpb.CreateTaskResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return taskResp(TaskID{}, sc.code), nil
	}
	var resp *masterpb.CreateTaskResponse
	err := s.do(func(st *State, now time.Time) {
		resp = taskResp(st.CreateMoveTask(sc.key(req.GetKey()), req.GetSource(), req.GetTarget(), now))
	})
	return resp, err
}

// QueryTask implements masterpb.MasterServer.
func (s *Server) QueryTask(ctx context.Context, req *masterpb.QueryTaskRequest) (*masterpb.QueryTaskResponse, error) {
	sc := s.scope(ctx)
	if sc.code != kvstore.OK {
		return &masterpb.QueryTaskResponse{ErrorCode: code32(sc.code)}, nil
	}
	var resp *masterpb.QueryTaskResponse
	err := s.do(func(st *State, now time.Time) {
		ti, code := st.QueryTask(sc.tenant, fromPBTaskID(req.GetId()))
		resp = &masterpb.QueryTaskResponse{ErrorCode: code32(code)}
		if code == kvstore.OK {
			resp.Id, resp.Type, resp.Status = toPBTaskID(ti.ID), masterpb.TaskType(ti.Type), masterpb.TaskStatus(ti.Status)
			resp.CreatedAtMsEpoch, resp.LastUpdatedAtMsEpoch = msEpoch(ti.Created), msEpoch(ti.Updated)
			resp.AssignedClient, resp.Message = ti.AssignedClient, ti.Message
		}
	})
	return resp, err
}

// MarkTaskComplete implements masterpb.MasterServer.
func (s *Server) MarkTaskComplete(ctx context.Context, req *masterpb.MarkTaskCompleteRequest) (*masterpb.StatusResponse, error) {
	var resp *masterpb.StatusResponse
	err := s.doAs(s.caller(ctx), req.GetClientId(), refuseStatus(&resp), func(st *State, now time.Time) {
		resp = &masterpb.StatusResponse{ErrorCode: code32(st.CompleteTask(req.GetClientId(), fromPBTaskID(req.GetId()), req.GetSuccess(), req.GetMessage(), now))}
	})
	return resp, err
}
