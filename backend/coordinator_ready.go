package backend

import (
	"context"
	"fmt"

	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// Group creation is all or nothing. A founding round that completes
// (joinTable) only tells each founder every other's endpoint; each then
// opens the others' segments, which can fail (a peer published an address
// this rank cannot reach, died, ran out of memory). Each founder reports
// its outcome with Ready, and the group exists only once every founder
// reported success: the first failure reported is answered, the same
// words, to every founder, which all fail their init with it. A founder
// that never reports (it died between Join and Ready) is found by the
// others' probes, which withdraw their success and report it
// (founding.go).

// readyTable holds, per group, the readiness round of its latest founding.
// Like joinTable, it is driven by the server under c.mu.
type readyTable struct {
	rounds map[string]*readyRound
}

type readyRound struct {
	size     int
	reported []bool
	ok       int
	failure  string // the first failure reported; "" none
	waiters  []chan string
	members  *groupMembers // the membership formed with the round (nil: none)
}

// start opens the readiness round of a group founded by size ranks,
// replacing any earlier one (a re-founding under the same name).
func (t *readyTable) start(id string, size int, gm *groupMembers) {
	if t.rounds == nil {
		t.rounds = map[string]*readyRound{}
	}
	if old := t.rounds[id]; old != nil {
		old.answer(fmt.Sprintf("group %q was founded again before every founder of the earlier founding was ready", id))
	}
	t.rounds[id] = &readyRound{size: size, reported: make([]bool, size), members: gm}
}

// report records rank's outcome (failure "" for success) and returns the
// channel the round's answer arrives on. failed is the membership to drop
// when this report fails the round.
func (t *readyTable) report(id string, rank int, failure string) (ch <-chan string, failed *groupMembers) {
	c := make(chan string, 1)
	rd := t.rounds[id]
	if rd == nil {
		c <- fmt.Sprintf("group %q has no founding in progress (rank %d reported after the round ended)", id, rank)
		return c, nil
	}
	if rank < 0 || rank >= rd.size {
		c <- fmt.Sprintf("group %q: rank %d is not a founder", id, rank)
		return c, nil
	}
	if rd.failure != "" {
		// The round already failed: answered at once, to a first report
		// and to one whose caller gave up on the answer it was sent (a
		// founder that withdrew its success just as another's failure
		// ended the round reports again, founding.go).
		rd.reported[rank] = true
		c <- rd.failure
		rd.done(t, id)
		return c, nil
	}
	if rd.reported[rank] {
		c <- fmt.Sprintf("group %q: rank %d reported its set-up twice", id, rank)
		return c, nil
	}
	rd.reported[rank] = true
	rd.waiters = append(rd.waiters, c)
	if failure != "" {
		rd.failure = fmt.Sprintf("group %q was not created: rank %d failed to set it up: %s", id, rank, failure)
		rd.answer(rd.failure)
		rd.done(t, id)
		return c, rd.members
	}
	rd.ok++
	if rd.ok == rd.size {
		rd.answer("")
		delete(t.rounds, id)
	}
	return c, nil
}

// answer sends s to every waiter.
func (rd *readyRound) answer(s string) {
	for _, w := range rd.waiters {
		w <- s
	}
	rd.waiters = nil
}

// done forgets a failed round once every founder has had its answer.
func (rd *readyRound) done(t *readyTable, id string) {
	for _, r := range rd.reported {
		if !r {
			return
		}
	}
	if t.rounds[id] == rd {
		delete(t.rounds, id)
	}
}

// cancel drops waiter ch (its caller gave up): the rank may report again.
func (t *readyTable) cancel(id string, rank int, ch <-chan string) {
	rd := t.rounds[id]
	if rd == nil {
		return
	}
	for i, w := range rd.waiters {
		if (<-chan string)(w) == ch {
			rd.waiters = append(rd.waiters[:i], rd.waiters[i+1:]...)
			rd.reported[rank] = false
			rd.ok--
			return
		}
	}
}

// Ready implements coordpb.CoordinatorServer.
func (c *coordinatorServer) Ready(ctx context.Context, r *coordpb.ReadyRequest) (*coordpb.ReadyResponse, error) {
	id, rank := r.GetGroupId(), int(r.GetRank())
	c.mu.Lock()
	ch, failed := c.ready.report(id, rank, r.GetError())
	if failed != nil && c.groups[id] == failed {
		c.drop(failed)
		delete(c.groups, id)
	}
	c.mu.Unlock()
	select {
	case s := <-ch:
		return &coordpb.ReadyResponse{Error: s}, nil
	case <-ctx.Done():
		c.mu.Lock()
		c.ready.cancel(id, rank, ch)
		c.mu.Unlock()
		select { // answered while we were cancelling
		case s := <-ch:
			return &coordpb.ReadyResponse{Error: s}, nil
		default:
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}
