package channel

import (
	"errors"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/transfer"
)

// Posted flags: a sender that need not wait for its flags to land (the
// collectives' acknowledgements, which only let the peer reuse a slot)
// posts them and ends the post later, when the wait costs nothing or
// before it touches their source words again.

// Posted is a post of flags whose transfers are in flight. A goroutine of
// its own follows the batch and runs the flags that failed once more,
// bounded by the post's Patience (as RunWithin), so a failure that a fresh
// connection cures is cured whether or not the poster ever waits.
type Posted struct {
	done    chan struct{}
	dropped atomic.Bool
	errs    []error // set before done closes
}

// errDropped marks the flags of a dropped post that did not land.
var errDropped = errors.New("channel: a flag of a dropped post did not land")

// Post publishes the flags of msgs, messages without payload, as a Put of
// EachMessage does, but returns without waiting for the flags that travel
// by transfer: through a direct view they are stored (and the receiver
// woken) before Post returns, the others go as one batch bounded by p's
// Timeout (the engine's transfer timeout without one). It returns the
// post of the flags in flight (nil: none, and then allocates nothing for
// them), whose source words must not change until Wait or Drop ends it,
// and the errors of messages that failed at once (nil: none). Nothing of
// msgs is kept.
func Post(eng *transfer.Engine, msgs []Message, p Patience) (*Posted, []error) {
	errs := failures{n: len(msgs)}
	var r transferRound
	for i := range msgs {
		if len(msgs[i].Flags) == 0 {
			continue
		}
		if err := publish(eng, &msgs[i], i, &r); err != nil {
			errs.set(i, err)
		}
	}
	if len(r.reqs) == 0 {
		return nil, errs.errs
	}
	timeout := eng.Timeout()
	if p.patient() {
		timeout = p.Timeout
	}
	id, err := eng.AllocateBatch(len(r.reqs))
	if err == nil {
		if err = eng.SubmitTransferWithin(id, r.reqs, timeout); err != nil {
			eng.FreeBatch(id)
		}
	}
	if err != nil {
		for _, o := range r.owner {
			errs.set(o, err)
		}
		return nil, errs.errs
	}
	ps := &Posted{done: make(chan struct{})}
	go ps.follow(eng, id, r, p, errs)
	return ps, nil
}

// follow waits for batch id (round r's requests), frees it, runs its
// failed requests again unless the post was dropped, and records every
// message's outcome.
func (ps *Posted) follow(eng *transfer.Engine, id transfer.BatchID, r transferRound, p Patience, errs failures) {
	defer close(ps.done)
	eng.WaitBatch(id)
	var failed []int
	for k := range r.reqs {
		if st, err := eng.TransferStatus(id, k); err != nil || st.Status != transfer.StatusCompleted {
			failed = append(failed, k)
		}
	}
	eng.FreeBatch(id)
	if len(failed) > 0 && ps.dropped.Load() {
		for _, k := range failed {
			errs.set(r.owner[k], errDropped)
		}
	} else if len(failed) > 0 {
		reqs := make([]transfer.Request, len(failed))
		for j, k := range failed {
			reqs[j] = r.reqs[k]
		}
		for j, err := range RunWithin(eng, reqs, p) {
			if err != nil {
				errs.set(r.owner[failed[j]], err)
			}
		}
	}
	ps.errs = errs.errs
}

// Wait ends the post: it returns once every flag landed or failed for
// good (failed ones having run once more), nil when all landed, else one
// error per message.
func (ps *Posted) Wait() []error {
	<-ps.done
	return ps.errs
}

// Drop ends the post without running failed flags again (if they have
// not started to): it returns once the flags in flight landed or failed,
// within the post's timeout.
func (ps *Posted) Drop() {
	ps.dropped.Store(true)
	<-ps.done
}
