package transfer

import (
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// AllocateBatch creates a batch that can hold capacity tasks.
func (e *Engine) AllocateBatch(capacity int) (BatchID, error) {
	if err := e.refuseClosed("allocate batch"); err != nil {
		return 0, err
	}
	if capacity <= 0 {
		return 0, errorf(CodeInvalidArgument, nil, "batch capacity %d", capacity)
	}
	e.batchMu.Lock()
	defer e.batchMu.Unlock()
	e.nextBat++
	e.batches[e.nextBat] = newBatch(capacity)
	return e.nextBat, nil
}

func (e *Engine) batch(id BatchID) (*batch, error) {
	e.batchMu.Lock()
	defer e.batchMu.Unlock()
	if b, ok := e.batches[id]; ok {
		return b, nil
	}
	return nil, errorf(CodeInvalidArgument, nil, "unknown batch %d", id)
}

// FreeBatch releases a batch; it is refused with CodeBatchBusy while any of
// its tasks is still running.
func (e *Engine) FreeBatch(id BatchID) error {
	e.batchMu.Lock()
	defer e.batchMu.Unlock()
	b, ok := e.batches[id]
	if !ok {
		return errorf(CodeInvalidArgument, nil, "unknown batch %d", id)
	}
	if b.busy() {
		return errorf(CodeBatchBusy, nil, "batch %d has tasks in flight", id)
	}
	delete(e.batches, id)
	return nil
}

// SubmitTransfer starts the requests in batch id and returns without
// waiting for any of them, whatever the transport (a same-host copy runs on
// the shm transport's workers). Every request is checked first (known
// segment, registered local memory, valid opcode); if any is invalid
// nothing is submitted. Zero-length requests complete at once.
func (e *Engine) SubmitTransfer(id BatchID, reqs []Request) error {
	return e.submit(id, reqs, false, e.cfg.TransferTimeout)
}

// SubmitTransferWithin is SubmitTransfer with its requests bounded by
// timeout instead of the engine's transfer timeout, as RunBatchWithin.
func (e *Engine) SubmitTransferWithin(id BatchID, reqs []Request, timeout time.Duration) error {
	return e.submit(id, reqs, false, timeout)
}

// submit is SubmitTransfer; with inline (RunBatch, which waits anyway,
// saves the hand-offs), a request that a connection can serve through a
// direct view of the peer's memory is copied on the caller's thread, and
// so is a batch of one request that a connection can run itself
// (transport.SyncRunner: tcp, one slice), before submit returns.
func (e *Engine) submit(id BatchID, reqs []Request, inline bool, timeout time.Duration) error {
	if err := e.enter("submit"); err != nil {
		return err
	}
	defer e.life.Exit()
	b, err := e.batch(id)
	if err != nil {
		return err
	}
	segs := make([]*remoteSegment, len(reqs))
	vias := make([]int, len(reqs))
	for i, r := range reqs {
		if vias[i], err = e.transportIndex(r.Transport); err != nil {
			return errorf(CodeInvalidArgument, err, "request %d", i)
		}
		if r.Opcode != OpRead && r.Opcode != OpWrite {
			return errorf(CodeInvalidArgument, nil, "request %d: bad opcode %d", i, r.Opcode)
		}
		if r.Length > 0 && e.reg.find(r.Source, r.Length) == nil {
			return errorf(CodeAddressNotRegistered, nil, "request %d: local [%#x,+%d) is not registered", i, r.Source, r.Length)
		}
		if r.TargetOffset+r.Length < r.TargetOffset {
			return errorf(CodeInvalidArgument, nil, "request %d: remote range wraps", i)
		}
		if err := e.checkTrailer(r); err != nil {
			return errorf(CodeOf(err), err, "request %d", i)
		}
		if segs[i], err = e.segment(r.Target); err != nil {
			return err
		}
		if err := e.linkBroken(segs[i].name); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(timeout)
	tasks, err := b.add(reqs, deadline)
	if err != nil {
		return err
	}
	routes := map[*remoteSegment]*route{} // looked up once per segment
	for i, t := range tasks {
		t.via = vias[i]
		e.run(segs[i], t, routes, inline, len(reqs) == 1)
	}
	return nil
}

// route is how a segment is reached during one submission.
type route struct {
	desc  *SegmentDesc
	conns []routeConn
	err   error
}

func routeOf(s *remoteSegment, cache map[*remoteSegment]*route) *route {
	r, ok := cache[s]
	if !ok {
		r = &route{}
		r.desc, r.conns, r.err = s.route(nil)
		cache[s] = r
	}
	return r
}

// run starts one task on the first of the segment's connections that
// carries its range (see submit for inline; alone: the task is its batch's
// only one).
func (e *Engine) run(s *remoteSegment, t *task, routes map[*remoteSegment]*route, inline, alone bool) {
	if t.req.Length == 0 {
		t.Start(1)
		t.FinishSlice(StatusCompleted, 0)
		return
	}
	// Held until the task settles, so the source cannot be unregistered
	// under the transfer.
	t.local = e.reg.acquire(t.req.Source, t.req.Length)
	if tr := t.req.Trailer; tr.Length > 0 && t.local != nil {
		t.trailer = e.reg.acquire(tr.Source, tr.Length)
	}
	if t.local == nil || t.req.Trailer.Length > 0 && t.trailer == nil {
		t.Start(1)
		t.FinishSlice(StatusFailed, 0)
		return
	}
	if s.name == e.name {
		st := StatusFailed
		if tr := t.req.Trailer; tr.Length == 0 || e.reg.find(uintptr(tr.TargetOffset), tr.Length) == e.reg.find(uintptr(t.req.TargetOffset), t.req.Length) {
			st = e.copyLocal(t.req, t.local)
		}
		if tr := t.req.Trailer; st == StatusCompleted && tr.Length > 0 {
			st = e.copyLocal(Request{Opcode: OpWrite, Source: tr.Source, TargetOffset: tr.TargetOffset, Length: tr.Length}, t.trailer)
		}
		t.Start(1)
		t.FinishSlice(st, t.req.Length)
		return
	}
	r := routeOf(s, routes)
	inBuffer := func(r *route) bool {
		i := r.desc.FindBuffer(t.req.TargetOffset, t.req.Length)
		return i >= 0 && trailerBuffer(r.desc, t, i)
	}
	if r.err == nil && !inBuffer(r) {
		// TCP splits a request into slices that the target checks one
		// by one, so a request running past its buffer would move the
		// slices that do fit. Check the whole range first, against a
		// fresh descriptor (the cached one may predate a registration);
		// a trailer must lie in the request's buffer (trailer.go).
		s.invalidate()
		delete(routes, s)
		if r = routeOf(s, routes); r.err == nil && !inBuffer(r) {
			r = &route{err: errorf(CodeAddressNotRegistered, nil, "remote [%#x,+%d) and its trailer are not inside one buffer of %q", t.req.TargetOffset, t.req.Length, s.name)}
		}
	}
	if r.err != nil {
		t.Start(1)
		t.FinishSlice(StatusFailed, 0)
		return
	}
	t.job = transport.Job{
		Op: t.req.Opcode, Local: t.req.Source, LocalMem: t.local.placement,
		Remote: t.req.TargetOffset, Length: t.req.Length, Deadline: t.deadline, Tracker: t,
		Trailer: t.jobTrailer(),
	}
	trailed := t.req.Trailer.Length > 0
	for _, rc := range r.conns {
		c := rc.conn
		if t.via >= 0 && rc.via != t.via || !c.Carries(t.req.TargetOffset, t.req.Length) ||
			trailed && !c.Carries(t.req.Trailer.TargetOffset, t.req.Trailer.Length) {
			continue
		}
		if v, ok := c.(transport.DirectView); ok && (inline || trailed) {
			if e.copyThrough(v, t) {
				return
			}
			continue // the view went away: the next transport
		}
		if _, ok := c.(transport.TrailerCarrier); trailed && !ok {
			continue
		}
		if r, ok := c.(transport.SyncRunner); ok && inline && alone && r.RunSync(&t.job) {
			return
		}
		c.Submit(&t.job)
		return
	}
	t.Start(1)
	t.FinishSlice(StatusFailed, 0)
}

// copyThrough runs t on the caller's thread through a direct view of the
// peer's memory, and reports whether the view was there.
func (e *Engine) copyThrough(v transport.DirectView, t *task) bool {
	var err error
	if !transport.View(v, t.req.TargetOffset, t.req.Length, func(mem []byte) {
		err = e.move(t.req.Opcode, t.req.Source, t.local.placement.Device, gpu.AddrOf(mem), false, t.req.Length)
	}) {
		return false
	}
	if tr := t.req.Trailer; err == nil && tr.Length > 0 && !transport.View(v, tr.TargetOffset, tr.Length, func(mem []byte) {
		err = e.move(OpWrite, tr.Source, t.trailer.placement.Device, gpu.AddrOf(mem), false, tr.Length)
	}) {
		err = errorf(CodeMemory, nil, "no view of the trailer's target")
	}
	t.Start(1)
	t.FinishSlice(transport.StatusOf(err), t.req.Length)
	return true
}

// copyLocal serves a transfer whose target is this engine's own segment;
// local is the source's region.
func (e *Engine) copyLocal(r Request, local *region) Status {
	dst := e.reg.acquire(uintptr(r.TargetOffset), r.Length)
	if dst == nil {
		return StatusFailed
	}
	defer dst.Release()
	if dst.localOnly {
		return StatusFailed
	}
	return transport.StatusOf(e.move(r.Opcode, r.Source, local.placement.Device, uintptr(r.TargetOffset), dst.placement.Device, r.Length))
}

// TransferStatus returns the state of one task of a batch.
func (e *Engine) TransferStatus(id BatchID, taskIndex int) (TransferStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return TransferStatus{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if taskIndex < 0 || taskIndex >= len(b.tasks) {
		return TransferStatus{}, errorf(CodeInvalidArgument, nil, "batch %d has no task %d", id, taskIndex)
	}
	return b.tasks[taskIndex].state(), nil
}

// BatchStatus returns the state of a whole batch: COMPLETED when every task
// is, FAILED or TIMEOUT when any task failed, PENDING otherwise.
func (e *Engine) BatchStatus(id BatchID) (TransferStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return TransferStatus{}, err
	}
	return b.state(), nil
}

// WaitBatch blocks until every task submitted to the batch is final, and
// returns the batch's state. Tasks carry their own deadlines, so it returns
// within the transfer timeout.
func (e *Engine) WaitBatch(id BatchID) (TransferStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return TransferStatus{}, err
	}
	<-b.wait()
	return b.state(), nil
}

// TransferSync runs reqs as one batch against the segment named target and
// waits for it. It returns nil only when every request completed.
func (e *Engine) TransferSync(target string, reqs []Request) error {
	if err := e.refuseClosed("transfer"); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return errorf(CodeInvalidArgument, nil, "no requests")
	}
	h, err := e.CachedSegment(target)
	if err != nil {
		return err
	}
	for i := range reqs {
		reqs[i].Target = h
	}
	states, err := e.RunBatch(reqs)
	if err != nil {
		return err
	}
	for _, st := range states {
		if st != StatusCompleted {
			return errorf(statusCode(st), nil, "transfer to %s: %s", target, st)
		}
	}
	return nil
}

// statusCode is the error number reported for a failed batch.
func statusCode(s Status) Code {
	if s == StatusTimeout {
		return CodeContext
	}
	return CodeSocket
}
