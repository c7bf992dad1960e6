package channel

import (
	"fmt"

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

// run runs the round and records, for each message whose request failed,
// the failure in errs (keeping an earlier error).
func (r *transferRound) run(eng *transfer.Engine, errs *failures) {
	if len(r.reqs) == 0 {
		return
	}
	for k, err := range Run(eng, r.reqs) {
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
// waited the engine's whole transfer timeout for an unresponsive peer.
func Run(eng *transfer.Engine, reqs []transfer.Request) []error {
	errs := make([]error, len(reqs))
	if len(reqs) == 0 {
		return errs
	}
	states, err := eng.RunBatch(reqs)
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
			errs[k] = fmt.Errorf("transfer %v", st)
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
