package master

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// This file cuts a batch call too large for one oplog entry into parts
// (docs/design/oplog.md, "Large calls"). Each batch method handles its
// items one by one, so running the parts in order, each as an entry of
// its own, changes the state exactly as the whole call would (apart from
// the batch request counter, counted per part), and a replica replays
// the very parts the leader ran. Other large entries are written in
// pieces (replication/writer.go).

// callPart is one entry's share of a call: the request the handler runs
// and logs, and where its items start in the whole call's.
type callPart struct {
	req     proto.Message
	payload []byte
	offset  int
}

// batchSplit cuts one batch method's requests and joins the answers.
type batchSplit struct {
	// parts cuts req into requests of at most room encoded bytes each
	// (one item larger than that is a part of its own), with the index
	// of each one's first item.
	parts func(req proto.Message, room int) ([]proto.Message, []int)
	// join adds part's answer, whose items start at offset, to whole's
	// (nil before the first part) and returns the whole answer.
	join func(whole, part proto.Message, offset int) proto.Message
}

// itemRuns cuts items into runs whose encoding (as a repeated field of
// the given items' sizes) takes at most room bytes; a run holds at least
// one item. It returns the runs and the index of each one's first item.
func itemRuns[T any](items []T, size func(T) int, room int) ([][]T, []int) {
	var runs [][]T
	var starts []int
	start, used := 0, 0
	for i, it := range items {
		n := size(it)
		n += protowire.SizeTag(1) + protowire.SizeVarint(uint64(n))
		if i > start && used+n > room {
			runs, starts = append(runs, items[start:i:i]), append(starts, start)
			start, used = i, 0
		}
		used += n
	}
	return append(runs, items[start:len(items):len(items)]), append(starts, start)
}

func keySize(k string) int { return len(k) }

func msgSize[T proto.Message](m T) int { return proto.Size(m) }

// splitBy builds the parts of a request of type Req whose items are
// those items returns: shell makes a part holding one run (and the
// request's other fields).
func splitBy[Req proto.Message, T any](items func(Req) []T, size func(T) int, shell func(Req, []T) Req) func(proto.Message, int) ([]proto.Message, []int) {
	return func(m proto.Message, room int) ([]proto.Message, []int) {
		req := m.(Req)
		runs, starts := itemRuns(items(req), size, room-proto.Size(shell(req, nil)))
		parts := make([]proto.Message, len(runs))
		for i, run := range runs {
			parts[i] = shell(req, run)
		}
		return parts, starts
	}
}

// joinBy builds the join of an answer type Resp: add appends a part's
// items to the whole answer's.
func joinBy[Resp proto.Message](add func(whole, part Resp, offset int)) func(proto.Message, proto.Message, int) proto.Message {
	return func(whole, part proto.Message, offset int) proto.Message {
		if whole == nil {
			whole = part.ProtoReflect().Type().New().Interface()
		}
		add(whole.(Resp), part.(Resp), offset)
		return whole
	}
}

var (
	splitPutStart = splitBy(func(r *masterpb.BatchPutStartRequest) []*masterpb.PutStartRequest { return r.Items },
		msgSize[*masterpb.PutStartRequest],
		func(_ *masterpb.BatchPutStartRequest, run []*masterpb.PutStartRequest) *masterpb.BatchPutStartRequest {
			return &masterpb.BatchPutStartRequest{Items: run}
		})
	joinPutStart = joinBy(func(w, p *masterpb.BatchPutStartResponse, _ int) { w.Items = append(w.Items, p.Items...) })
	joinStatus   = joinBy(func(w, p *masterpb.BatchStatusResponse, _ int) { w.ErrorCodes = append(w.ErrorCodes, p.ErrorCodes...) })
	splitKeys    = splitBy(func(r *masterpb.BatchKeyRequest) []string { return r.Keys }, keySize,
		func(_ *masterpb.BatchKeyRequest, run []string) *masterpb.BatchKeyRequest {
			return &masterpb.BatchKeyRequest{Keys: run}
		})
)

// batchSplits are the methods whose calls can be cut, by full name.
var batchSplits = map[string]batchSplit{
	masterpb.Master_BatchPutStart_FullMethodName:    {splitPutStart, joinPutStart},
	masterpb.Master_BatchUpsertStart_FullMethodName: {splitPutStart, joinPutStart},
	masterpb.Master_BatchPutEnd_FullMethodName: {
		splitBy(func(r *masterpb.BatchPutEndRequest) []*masterpb.PutEndRequest { return r.Items },
			msgSize[*masterpb.PutEndRequest],
			func(_ *masterpb.BatchPutEndRequest, run []*masterpb.PutEndRequest) *masterpb.BatchPutEndRequest {
				return &masterpb.BatchPutEndRequest{Items: run}
			}),
		joinStatus,
	},
	masterpb.Master_BatchPutRevoke_FullMethodName: {
		splitBy(func(r *masterpb.BatchPutRevokeRequest) []*masterpb.PutRevokeRequest { return r.Items },
			msgSize[*masterpb.PutRevokeRequest],
			func(_ *masterpb.BatchPutRevokeRequest, run []*masterpb.PutRevokeRequest) *masterpb.BatchPutRevokeRequest {
				return &masterpb.BatchPutRevokeRequest{Items: run}
			}),
		joinStatus,
	},
	masterpb.Master_BatchPutCommit_FullMethodName: {
		splitBy(func(r *masterpb.BatchPutCommitRequest) []*masterpb.PutCommitRequest { return r.Items },
			msgSize[*masterpb.PutCommitRequest],
			func(_ *masterpb.BatchPutCommitRequest, run []*masterpb.PutCommitRequest) *masterpb.BatchPutCommitRequest {
				return &masterpb.BatchPutCommitRequest{Items: run}
			}),
		joinBy(func(w, p *masterpb.BatchPutCommitResponse, _ int) {
			w.ErrorCodes = append(w.ErrorCodes, p.ErrorCodes...)
			w.ReservationGone = append(w.ReservationGone, p.ReservationGone...)
		}),
	},
	masterpb.Master_BatchGetReplicaList_FullMethodName: {splitKeys,
		joinBy(func(w, p *masterpb.BatchGetReplicaListResponse, _ int) { w.Items = append(w.Items, p.Items...) })},
	masterpb.Master_BatchExistKey_FullMethodName: {splitKeys,
		joinBy(func(w, p *masterpb.BatchExistKeyResponse, _ int) { w.Items = append(w.Items, p.Items...) })},
	masterpb.Master_BatchExistCodes_FullMethodName: {splitKeys,
		joinBy(func(w, p *masterpb.ExistCodesResponse, _ int) { w.Codes = append(w.Codes, p.Codes...) })},
	masterpb.Master_BatchRemove_FullMethodName: {
		splitBy(func(r *masterpb.BatchRemoveRequest) []string { return r.Keys }, keySize,
			func(r *masterpb.BatchRemoveRequest, run []string) *masterpb.BatchRemoveRequest {
				return &masterpb.BatchRemoveRequest{Keys: run, Force: r.Force}
			}),
		joinStatus,
	},
	masterpb.Master_BatchReplicaClear_FullMethodName: {
		splitBy(func(r *masterpb.BatchReplicaClearRequest) []string { return r.Keys }, keySize,
			func(r *masterpb.BatchReplicaClearRequest, run []string) *masterpb.BatchReplicaClearRequest {
				return &masterpb.BatchReplicaClearRequest{ClientId: r.ClientId, Keys: run, SegmentName: r.SegmentName}
			}),
		joinBy(func(w, p *masterpb.BatchReplicaClearResponse, offset int) {
			if w.ErrorCode == 0 {
				w.ErrorCode = p.ErrorCode
			}
			for _, i := range p.Cleared {
				w.Cleared = append(w.Cleared, i+uint32(offset))
			}
		}),
	},
	masterpb.DiskTier_NotifyOffloadResult_FullMethodName: {
		splitBy(func(r *masterpb.NotifyOffloadResultRequest) []*masterpb.OffloadResult { return r.Results },
			msgSize[*masterpb.OffloadResult],
			func(r *masterpb.NotifyOffloadResultRequest, run []*masterpb.OffloadResult) *masterpb.NotifyOffloadResultRequest {
				return &masterpb.NotifyOffloadResultRequest{ClientId: r.ClientId, Results: run}
			}),
		joinStatus,
	},
}

// callParts encodes a call's request as the calls it is logged as: one
// when it fits an entry (replication.PayloadRoom) or its method cannot be
// cut, else its parts. (An entry still too large, a part with one huge item
// or a call that cannot be cut, is written in pieces by the writer.)
func callParts(method string, md map[string]string, req proto.Message) ([]callPart, error) {
	payload, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode the request: %w", err)
	}
	room := replication.PayloadRoom(method, md)
	sp, ok := batchSplits[method]
	if len(payload) <= room || !ok {
		return []callPart{{req: req, payload: payload}}, nil
	}
	reqs, starts := sp.parts(req, room)
	parts := make([]callPart, len(reqs))
	for i, r := range reqs {
		b, err := proto.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode part %d of the request: %w", i, err)
		}
		parts[i] = callPart{req: r, payload: b, offset: starts[i]}
	}
	return parts, nil
}
