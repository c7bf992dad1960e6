package transfer

import "time"

// RunBatch submits reqs as one batch, waits until every request is final,
// and returns each request's final state (states[i] is reqs[i]'s). It is
// the synchronous form of AllocateBatch, SubmitTransfer, WaitBatch and
// FreeBatch, except that a request a connection can serve through a direct
// view of the peer's memory (a same-host shared buffer) is copied on the
// caller's thread, which is quicker than handing it to a worker and
// waiting. An error means the batch could not be run at all (a closed
// engine, an invalid request: nothing was submitted).
func (e *Engine) RunBatch(reqs []Request) ([]Status, error) {
	return e.RunBatchWithin(reqs, e.cfg.TransferTimeout)
}

// RunBatchWithin is RunBatch with its requests bounded by timeout instead
// of the engine's transfer timeout (MC_TRANSFER_TIMEOUT): a request not
// done by then ends TIMEOUT. Callers that bound their own waits (the
// collectives: their timeout, then a probe of the peer) bound their
// transfers the same way.
func (e *Engine) RunBatchWithin(reqs []Request, timeout time.Duration) ([]Status, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	id, err := e.AllocateBatch(len(reqs))
	if err != nil {
		return nil, err
	}
	defer e.FreeBatch(id)
	if err := e.submit(id, reqs, true, timeout); err != nil {
		return nil, err
	}
	b, err := e.batch(id)
	if err != nil {
		return nil, err
	}
	<-b.wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	states := make([]Status, len(b.tasks))
	for i, t := range b.tasks {
		states[i] = t.state().Status
	}
	return states, nil
}
