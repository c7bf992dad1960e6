package channel

import (
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/transfer"
)

// transferRound is a batch of transfers on behalf of messages: reqs[k]
// belongs to message owner[k].
type transferRound struct {
	reqs  []transfer.Request
	owner []int
}

func (r *transferRound) add(owner int, req transfer.Request) {
	r.reqs = append(r.reqs, req)
	r.owner = append(r.owner, owner)
}

// run runs the round, bounded by p, and records, for each message whose
// request failed, the failure in errs (keeping an earlier error).
func (r *transferRound) run(eng *transfer.Engine, errs *failures, p Patience) {
	if len(r.reqs) == 0 {
		return
	}
	for k, err := range RunWithin(eng, r.reqs, p) {
		if err != nil {
			errs.set(r.owner[k], err)
		}
	}
}

// Run runs reqs as one batch and returns one error per request (nil:
// completed). Requests that fail are run once more, each on its own (the
// engine's READs and WRITEs are idempotent), so that a failure that a fresh
// connection cures fails nobody and the rest name the requests that
// really failed. A request that timed out is not run again: it already
// waited the engine's whole transfer timeout for an unresponsive peer
// (RunWithin's Patience runs it again while the peer answers).
func Run(eng *transfer.Engine, reqs []transfer.Request) []error {
	return RunWithin(eng, reqs, Patience{})
}

// RunWithin is Run bounded by p: a request that timed out runs again
// while its peer answers p.Alive (Patience).
func RunWithin(eng *transfer.Engine, reqs []transfer.Request, p Patience) []error {
	errs := make([]error, len(reqs))
	if len(reqs) == 0 {
		return errs
	}
	start := time.Now()
	var gone map[transfer.SegmentHandle]error // peers that did not answer p.Alive
	states, err := p.run(eng, reqs)
	if err != nil {
		for k := range errs {
			errs[k] = err
		}
		return errs
	}
	for k, st := range states {
		if st == transfer.StatusCompleted {
			continue
		}
		if st == transfer.StatusTimeout {
			if errs[k] = gone[reqs[k].Target]; errs[k] == nil {
				errs[k] = p.outlast(eng, reqs[k], start, &gone)
			}
			continue
		}
		again, err := eng.RunBatch(reqs[k : k+1])
		switch {
		case err != nil:
			errs[k] = err
		case again[0] != transfer.StatusCompleted:
			errs[k] = fmt.Errorf("transfer %v (then %v on retry)", st, again[0])
		}
	}
	return errs
}
