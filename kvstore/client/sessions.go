package client

import (
	"errors"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// Sessions serve layer-wise loading and storing (upstream's batch_*_session
// calls): a session start asks the master once per key, then any number of
// ranged transfers move bytes without asking it again, and a session end
// closes them.

// Span is one buffer of a ranged session transfer: Size bytes at Addr,
// read from or written to object offset Offset.
type Span struct {
	Addr   uintptr
	Size   uint64
	Offset uint64
}

// getSession is a read session: the key's readable replicas (in read
// order) and the lease the master granted with them.
type getSession struct {
	replicas []*pb.ReplicaDescriptor
	size     uint64
	queried  time.Time
	leaseTTL uint64 // ms
}

func (s *getSession) expired() bool { return leaseExpired(s.queried, s.leaseTTL) }

// putSession is a write session: the replicas reserved by PutStart, the
// ranged writes in flight, and the first write that failed.
type putSession struct {
	size     uint64
	replicas []*pb.ReplicaDescriptor
	inflight sync.WaitGroup
	mu       sync.Mutex
	failed   error
}

func (s *putSession) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = err
	}
}

// sessions holds a client's open sessions by key.
type sessions struct {
	mu   sync.Mutex
	gets map[string]*getSession
	puts map[string]*putSession
}

func (t *sessions) get(key string) *getSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gets[key]
}

func (t *sessions) setGet(key string, s *getSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gets == nil {
		t.gets = map[string]*getSession{}
	}
	if s == nil {
		delete(t.gets, key)
	} else {
		t.gets[key] = s
	}
}

func (t *sessions) put(key string) *putSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.puts[key]
}

// holdPut returns key's write session with one more write counted in
// flight (the caller calls inflight.Done), or nil.
func (t *sessions) holdPut(key string) *putSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.puts[key]
	if s != nil {
		s.inflight.Add(1)
	}
	return s
}

// takePut removes and returns key's write session.
func (t *sessions) takePut(key string) *putSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.puts[key]
	delete(t.puts, key)
	return s
}

// setPut records key's write session.
func (t *sessions) setPut(key string, s *putSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.puts == nil {
		t.puts = map[string]*putSession{}
	}
	t.puts[key] = s
}

// GetSessionStart opens a read session per key with one master query for
// all of them (granting read leases). Per key: nil, the query's error,
// LEASE_EXPIRED if the lease ran out already, or INVALID_REPLICA when no
// replica is complete. A key's earlier session is replaced.
func (c *Client) GetSessionStart(keys []string) []error {
	out := make([]error, len(keys))
	if !c.life.Enter() {
		return fill(out, errClientClosed)
	}
	defer c.life.Exit()
	lists, queried := c.replicaLists(keys)
	for i, key := range keys {
		l := lists[i]
		if code := kvstore.ErrorCode(l.GetErrorCode()); code != kvstore.OK {
			out[i] = code
			continue
		}
		reps := c.readOrder(l.GetReplicas())
		if len(reps) == 0 {
			out[i] = kvstore.InvalidReplica
			continue
		}
		s := &getSession{replicas: reps, size: reps[0].GetSize(), queried: queried, leaseTTL: l.GetLeaseTtlMs()}
		if s.expired() {
			out[i] = kvstore.LeaseExpired
			continue
		}
		c.sessions.setGet(key, s)
	}
	return out
}

// validSpans checks spans against an object of size bytes.
func validSpans(spans []Span, size uint64) bool {
	for _, sp := range spans {
		if (sp.Addr == 0 && sp.Size > 0) || sp.Offset > size || sp.Size > size-sp.Offset {
			return false
		}
	}
	return true
}

// GetSessionRanges reads, for each key with a read session, spans[i]
// (each Span.Size bytes from object offset Span.Offset into Span.Addr),
// asking the master nothing. Per key it returns the bytes read, or:
// INVALID_PARAMS (no session, a span outside the object), LEASE_EXPIRED
// (the lease ran out before or during the read: the session is dropped),
// TRANSFER_FAIL (no replica could be read).
func (c *Client) GetSessionRanges(keys []string, spans [][]Span) []GetResult {
	if !c.life.Enter() {
		return fillErr(make([]GetResult, len(keys)), errClientClosed)
	}
	defer c.life.Exit()
	return perKey(keys, spans, c.readSpans)
}

// perKey runs fn for every key and its spans, all keys in parallel; lists
// of different lengths are INVALID_PARAMS for every key.
func perKey(keys []string, spans [][]Span, fn func(key string, spans []Span) GetResult) []GetResult {
	out := make([]GetResult, len(keys))
	if len(spans) != len(keys) {
		for i := range out {
			out[i].Err = kvstore.InvalidParams
		}
		return out
	}
	parallel(len(keys), func(i int) error {
		out[i] = fn(keys[i], spans[i])
		return nil
	})
	return out
}

func (c *Client) readSpans(key string, spans []Span) GetResult {
	s := c.sessions.get(key)
	switch {
	case s == nil || !validSpans(spans, s.size):
		return GetResult{Err: kvstore.InvalidParams}
	case s.expired():
		c.sessions.setGet(key, nil)
		return GetResult{Err: kvstore.LeaseExpired}
	}
	err := parallel(len(spans), func(j int) error {
		sp := spans[j]
		if sp.Size == 0 {
			return nil
		}
		var err error
		for _, rep := range s.replicas { // the next replica when a transfer fails
			if err = c.readReplica([]Part{{sp.Addr, sp.Size}}, rep, sp.Offset, sp.Size, false); err == nil || !errors.Is(err, kvstore.TransferFail) {
				break
			}
		}
		return err
	})
	if err != nil {
		return GetResult{Err: err}
	}
	if s.expired() {
		c.sessions.setGet(key, nil)
		return GetResult{Err: kvstore.LeaseExpired}
	}
	return GetResult{Size: spansSize(spans)}
}

// GetSessionEnd drops the read sessions of keys.
func (c *Client) GetSessionEnd(keys []string) {
	for _, k := range keys {
		c.sessions.setGet(k, nil)
	}
}

// PutSessionStart reserves replicas for each key (PutStart, in one master
// call) and opens a write session; the object stays invisible until
// PutSessionEnd. Per key: nil, INVALID_PARAMS (empty key, size 0, a session
// already open, group ids not one per key), or the master's error
// (OBJECT_ALREADY_EXISTS, NO_AVAILABLE_HANDLE, ...).
func (c *Client) PutSessionStart(keys []string, sizes []uint64, cfg ReplicateConfig) []error {
	errs := make([]error, len(keys))
	if !c.life.Enter() {
		return fill(errs, errClientClosed)
	}
	defer c.life.Exit()
	if len(sizes) != len(keys) || (cfg.GroupIDs != nil && len(cfg.GroupIDs) != len(keys)) {
		return fill(errs, kvstore.InvalidParams)
	}
	pcfg := c.placement(cfg)
	var starts []*pb.PutStartRequest
	var idx []int
	seen := map[string]bool{}
	for i, k := range keys {
		if k == "" || sizes[i] == 0 || seen[k] || c.sessions.put(k) != nil {
			errs[i] = kvstore.InvalidParams
			continue
		}
		seen[k] = true
		starts = append(starts, &pb.PutStartRequest{ClientId: c.id, Key: k, Size: sizes[i], Config: pcfg, GroupId: cfg.groupID(i)})
		idx = append(idx, i)
	}
	if len(starts) == 0 {
		return errs
	}
	ctx, cancel := rpcContext()
	resp, err := c.master.client().BatchPutStart(ctx, &pb.BatchPutStartRequest{Items: starts})
	cancel()
	for j, i := range idx {
		if err != nil || j >= len(resp.GetItems()) {
			errs[i] = rpcResult(0, firstNonNil(err, kvstore.RPCFail))
			continue
		}
		item := resp.Items[j]
		switch {
		case item.GetErrorCode() != 0:
			errs[i] = kvstore.ErrorCode(item.GetErrorCode())
		case len(item.GetReplicas()) == 0:
			errs[i] = kvstore.NoAvailableHandle
		default:
			// Sessions write memory replicas only: a DISK replica
			// (fsdisk.go) is given back.
			mem, disk := splitFS(item.GetReplicas())
			if disk != nil {
				c.revokeFS(keys[i])
			}
			// The master's answer is the truth: a session opened meanwhile
			// by a concurrent call holds a reservation it has replaced.
			c.sessions.setPut(keys[i], &putSession{size: sizes[i], replicas: mem})
		}
	}
	return errs
}

// PutSessionRanges writes, for each key with a write session, spans[i]
// (each Span.Size bytes from Span.Addr at object offset Span.Offset) to
// every reserved replica. Per key it returns the bytes written, or
// INVALID_PARAMS (no session, a span outside the object) or the transfer's
// error; a failed write makes PutSessionEnd revoke the object.
func (c *Client) PutSessionRanges(keys []string, spans [][]Span) []GetResult {
	if !c.life.Enter() {
		return fillErr(make([]GetResult, len(keys)), errClientClosed)
	}
	defer c.life.Exit()
	return perKey(keys, spans, c.writeSpans)
}

func (c *Client) writeSpans(key string, spans []Span) GetResult {
	s := c.sessions.holdPut(key) // counted in flight: an end waits for this write
	if s == nil {
		return GetResult{Err: kvstore.InvalidParams}
	}
	defer s.inflight.Done()
	if !validSpans(spans, s.size) {
		return GetResult{Err: kvstore.InvalidParams}
	}
	err := parallel(len(spans), func(j int) error {
		if sp := spans[j]; sp.Size > 0 {
			return c.writeReplicas([]Part{{sp.Addr, sp.Size}}, s.replicas, sp.Offset, false)
		}
		return nil
	})
	if err != nil {
		s.fail(err)
		return GetResult{Err: err}
	}
	return GetResult{Size: spansSize(spans)}
}

func spansSize(spans []Span) uint64 {
	var n uint64
	for _, sp := range spans {
		n += sp.Size
	}
	return n
}

// PutSessionEnd waits for each key's ranged writes, then publishes the
// objects (PutEnd, one master call). A session with a failed write is
// revoked instead and reports that failure; a key without a session is
// INVALID_PARAMS.
func (c *Client) PutSessionEnd(keys []string) []error {
	if !c.life.Enter() {
		return fill(make([]error, len(keys)), errClientClosed)
	}
	defer c.life.Exit()
	errs, held := c.closePuts(keys)
	var ends []*pb.PutEndRequest
	var idx []int
	var revokes []string
	for i, s := range held {
		switch {
		case s == nil:
		case s.failed != nil:
			errs[i] = s.failed
			revokes = append(revokes, keys[i])
		default:
			ends = append(ends, &pb.PutEndRequest{ClientId: c.id, Key: keys[i]})
			idx = append(idx, i)
		}
	}
	c.revoke(revokes)
	if len(ends) == 0 {
		return errs
	}
	ctx, cancel := rpcContext()
	defer cancel()
	r, err := c.master.client().BatchPutEnd(ctx, &pb.BatchPutEndRequest{Items: ends})
	for j, i := range idx {
		if err != nil || j >= len(r.GetErrorCodes()) {
			errs[i] = rpcResult(0, firstNonNil(err, kvstore.RPCFail))
		} else {
			errs[i] = kvstore.ErrorCode(r.ErrorCodes[j]).Err()
		}
	}
	return errs
}

// closePuts removes the write sessions of keys and waits for their ranged
// writes. A key without a session gets INVALID_PARAMS and a nil session.
func (c *Client) closePuts(keys []string) ([]error, []*putSession) {
	errs := make([]error, len(keys))
	held := make([]*putSession, len(keys))
	for i, k := range keys {
		if held[i] = c.sessions.takePut(k); held[i] == nil {
			errs[i] = kvstore.InvalidParams
		} else {
			held[i].inflight.Wait()
		}
	}
	return errs, held
}

// PutSessionRevoke waits for each key's ranged writes, then cancels the
// write (PutRevoke): the reserved replicas are freed. A key without a
// session is INVALID_PARAMS.
func (c *Client) PutSessionRevoke(keys []string) []error {
	if !c.life.Enter() {
		return fill(make([]error, len(keys)), errClientClosed)
	}
	defer c.life.Exit()
	errs, held := c.closePuts(keys)
	var revokes []string
	var idx []int
	for i, s := range held {
		if s != nil {
			revokes = append(revokes, keys[i])
			idx = append(idx, i)
		}
	}
	for j, err := range c.revoke(revokes) {
		errs[idx[j]] = err
	}
	return errs
}

// revoke cancels this client's open writes of keys in one master call and
// returns the result per key.
func (c *Client) revoke(keys []string) []error {
	errs := make([]error, len(keys))
	if len(keys) == 0 {
		return errs
	}
	items := make([]*pb.PutRevokeRequest, len(keys))
	for i, k := range keys {
		items[i] = &pb.PutRevokeRequest{ClientId: c.id, Key: k}
	}
	ctx, cancel := rpcContext()
	defer cancel()
	r, err := c.master.client().BatchPutRevoke(ctx, &pb.BatchPutRevokeRequest{Items: items})
	for i := range errs {
		if err != nil || i >= len(r.GetErrorCodes()) {
			errs[i] = rpcResult(0, firstNonNil(err, kvstore.RPCFail))
		} else {
			errs[i] = kvstore.ErrorCode(r.ErrorCodes[i]).Err()
		}
	}
	return errs
}
