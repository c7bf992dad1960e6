package backend

import (
	"fmt"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// joinTable is the coordinator's state: for each group, the round of joins
// in progress. It is a plain type driven by method calls (no I/O, no
// goroutines); the gRPC server serialises calls to it.
//
// A round completes when all size ranks joined; its result goes to every
// joiner and the group's next join starts a new round, which is how
// destroy_process_group followed by a re-init under the same name works.
type joinTable struct {
	rounds map[string]*joinRound
	// formed, when set, is called when a round completes: the coordinator
	// starts the group's membership then and returns its first view.
	formed func(groupID string, rd *joinRound, manual bool) *coordpb.View
}

type joinRound struct {
	size    int
	maxSize int
	layout  string
	eps     []*coordpb.Endpoint
	joined  int
	waiters []chan joinResult
}

type joinResult struct {
	eps  []*coordpb.Endpoint
	view *coordpb.View
	err  error
}

// join records r and returns the channel its result will arrive on; when r
// is the last missing rank, every waiter of the round gets its result now.
func (t *joinTable) join(r *coordpb.JoinRequest) <-chan joinResult {
	ch := make(chan joinResult, 1)
	if t.rounds == nil {
		t.rounds = map[string]*joinRound{}
	}
	size, rank, maxSize := int(r.GetSize()), int(r.GetRank()), max(int(r.GetMaxSize()), int(r.GetSize()))
	if size <= 0 || rank < 0 || rank >= size {
		ch <- joinResult{err: fmt.Errorf("%w: rank %d of size %d", ErrInvalid, rank, size)}
		return ch
	}
	rd := t.rounds[r.GetGroupId()]
	if rd != nil && (rd.size != size || rd.maxSize != maxSize || rd.layout != r.GetLayout()) {
		err := fmt.Errorf("%w: group %q joined with size %d of %d slots, layout %q, but an earlier rank used size %d of %d, layout %q",
			ErrInvalid, r.GetGroupId(), size, maxSize, r.GetLayout(), rd.size, rd.maxSize, rd.layout)
		ch <- joinResult{err: err}
		return ch
	}
	if rd == nil {
		rd = &joinRound{size: size, maxSize: maxSize, layout: r.GetLayout(), eps: make([]*coordpb.Endpoint, size)}
		t.rounds[r.GetGroupId()] = rd
	}
	if rd.eps[rank] == nil {
		rd.joined++
	}
	rd.eps[rank] = r.GetEndpoint()
	rd.waiters = append(rd.waiters, ch)
	if rd.joined == size {
		var view *coordpb.View
		if t.formed != nil {
			view = t.formed(r.GetGroupId(), rd, r.GetManual())
		}
		for _, w := range rd.waiters {
			w <- joinResult{eps: rd.eps, view: view}
		}
		delete(t.rounds, r.GetGroupId())
	}
	return ch
}

// cancel drops waiter ch (its caller gave up); a rank that leaves a round
// before it completes must join again.
func (t *joinTable) cancel(groupID string, rank int, ch <-chan joinResult) {
	rd := t.rounds[groupID]
	if rd == nil {
		return
	}
	for i, w := range rd.waiters {
		if (<-chan joinResult)(w) == ch {
			rd.waiters = append(rd.waiters[:i], rd.waiters[i+1:]...)
			if rank >= 0 && rank < len(rd.eps) && rd.eps[rank] != nil {
				rd.eps[rank] = nil
				rd.joined--
			}
			break
		}
	}
	if rd.joined == 0 {
		delete(t.rounds, groupID)
	}
}
