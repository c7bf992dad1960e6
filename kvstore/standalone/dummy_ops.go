package standalone

import (
	"context"
	"fmt"
	"strings"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
)

// firstGuess is the staging space a get of unknown size starts with; a
// larger object is read again into space of its size.
const firstGuess = 1 << 20

// staging is space of the local buffer lent to one key of a call.
type staging struct {
	addr uintptr
	size uint64
}

// stage lends n bytes of the local buffer (waiting for space up to the
// call deadline); ok=false without a local buffer or when n exceeds it.
func (d *Dummy) stage(n uint64) (staging, bool) {
	if d.arena == nil || n > d.arena.Size() {
		return staging{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout())
	defer cancel()
	p, err := d.arena.Alloc(ctx, max(n, 1), 64)
	if err != nil {
		return staging{}, false
	}
	return staging{p, n}, true
}

func (d *Dummy) unstage(s []staging) {
	for _, x := range s {
		if x.addr != 0 {
			d.arena.Free(x.addr)
		}
	}
}

func (s staging) part() client.Part { return client.Part{Addr: s.addr, Size: s.size} }

func (s staging) span() span { return span{Addr: uint64(s.addr), Size: s.size} }

// BatchPut stores objects through the daemon: parts in registered regions
// are read in place, others are first copied into the local buffer.
func (d *Dummy) BatchPut(keys []string, parts [][]client.Part, cfg client.ReplicateConfig, opt client.PutOptions) []error {
	errs := make([]error, len(keys))
	if !d.life.Enter() {
		return fillErrs(errs, kvstore.InvalidParams)
	}
	defer d.life.Exit()
	if len(parts) != len(keys) || (!opt.ZeroCopy && cfg.PreferAllocInSameNode) {
		return fillErrs(errs, kvstore.InvalidParams) // as the real client
	}
	req := request{Op: opPut, Config: &cfg, Upsert: opt.Upsert, Parts: make([][]span, 0, len(keys))}
	var idx []int
	lent := make([]staging, len(keys))
	defer d.unstage(lent)
	for i, k := range keys {
		n := client.PartsSize(parts[i])
		if n == 0 && !opt.ZeroCopy {
			errs[i] = kvstore.InvalidParams // a copying put of nothing, as the real client
			continue
		}
		spans, ok := d.spansOf(parts[i])
		if !ok {
			s, ok := d.stage(n)
			if !ok {
				errs[i] = fmt.Errorf("%w: %d bytes outside registered buffers and no room in the local buffer", kvstore.InvalidParams, n)
				continue
			}
			lent[i] = s
			if err := client.CopyFromParts(gpu.HostBytes(s.addr, n), parts[i]); err != nil {
				errs[i] = err
				continue
			}
			spans = []span{s.span()}
		}
		req.Keys, req.Parts, idx = append(req.Keys, k), append(req.Parts, spans), append(idx, i)
	}
	if len(idx) == 0 {
		return errs
	}
	if cfg.GroupIDs != nil && len(idx) != len(keys) {
		req.Config.GroupIDs = groupsOf(cfg.GroupIDs, idx)
	}
	resp, err := d.call(req)
	for j, i := range idx {
		errs[i] = perKey(resp, err, j)
	}
	return errs
}

// perKey is the result of key j of a call as an error.
func perKey(resp response, err error, j int) error {
	switch {
	case err != nil:
		return err
	case resp.Code != 0:
		return resp.err()
	case j >= len(resp.Codes):
		return kvstore.RPCFail
	case resp.Codes[j] < 0:
		return kvstore.ErrorCode(resp.Codes[j])
	}
	return nil
}

// BatchGetInto reads objects into parts: from the mapped hot cache when
// it holds them, else through the daemon (in place when the parts are in
// registered regions, else staged through the local buffer).
func (d *Dummy) BatchGetInto(keys []string, parts [][]client.Part, _ bool) []client.GetResult {
	out := make([]client.GetResult, len(keys))
	if !d.life.Enter() {
		return fillResults(out, kvstore.InvalidParams)
	}
	defer d.life.Exit()
	if len(parts) != len(keys) {
		return fillResults(out, kvstore.InvalidParams)
	}
	var miss []int
	for i, k := range keys {
		if n, ok := d.cachedInto(k, parts[i]); ok {
			out[i].Size = n
		} else {
			miss = append(miss, i)
		}
	}
	if len(miss) == 0 {
		return out
	}
	caps := make([]uint64, len(miss))
	for j, i := range miss {
		caps[j] = client.PartsSize(parts[i])
	}
	res, lent := d.getThroughDaemon(keys, miss, parts, caps)
	defer d.unstage(lent)
	for j, i := range miss {
		r := res[j]
		if errorsIs(r.Err, kvstore.BufferOverflow) {
			r.Err = kvstore.InvalidParams // a destination too small, as the real client's get_into
		}
		if r.Err == nil && lent[j].addr != 0 && !scatter(parts[i], gpu.HostBytes(lent[j].addr, r.Size)) {
			r = client.GetResult{Err: kvstore.InternalError} // a copy into device memory failed
		}
		out[i] = r
	}
	return out
}

// BatchGet reads objects of unknown size into memory from alloc.
func (d *Dummy) BatchGet(keys []string, alloc client.Allocator) []client.GetResult {
	out := make([]client.GetResult, len(keys))
	if !d.life.Enter() {
		return fillResults(out, kvstore.InvalidParams)
	}
	defer d.life.Exit()
	deliver := func(i int, data []byte) {
		dst, err := alloc(i, uint64(len(data)))
		if err != nil {
			out[i].Err = err
			return
		}
		if !scatter(dst, data) {
			out[i].Err = kvstore.InternalError
			return
		}
		out[i].Size = uint64(len(data))
	}
	var miss []int
	for i, k := range keys {
		if data, ok := d.cachedCopy(k); ok {
			deliver(i, data)
		} else {
			miss = append(miss, i)
		}
	}
	if len(miss) == 0 {
		return out
	}
	if d.arena == nil {
		for _, i := range miss {
			out[i].Err = fmt.Errorf("%w: a dummy client without a local buffer cannot get by copy", kvstore.InvalidParams)
		}
		return out
	}
	caps := make([]uint64, len(miss))
	for j := range caps {
		caps[j] = min(firstGuess, d.arena.Size())
	}
	res, lent := d.getThroughDaemon(keys, miss, nil, caps)
	var again []int // positions in miss that need more room
	for j, r := range res {
		if errorsIs(r.Err, kvstore.BufferOverflow) && r.Size > caps[j] && r.Size <= d.arena.Size() {
			again = append(again, j)
		}
	}
	if len(again) > 0 {
		retryIdx := make([]int, len(again))
		retryCaps := make([]uint64, len(again))
		for k, j := range again {
			retryIdx[k], retryCaps[k] = miss[j], res[j].Size
			d.arena.Free(lent[j].addr)
			lent[j] = staging{}
		}
		res2, lent2 := d.getThroughDaemon(keys, retryIdx, nil, retryCaps)
		for k, j := range again {
			res[j], lent[j] = res2[k], lent2[k]
		}
	}
	defer d.unstage(lent)
	for j, i := range miss {
		r := res[j]
		switch {
		case r.Err == nil:
			deliver(i, gpu.HostBytes(lent[j].addr, r.Size))
		case errorsIs(r.Err, kvstore.BufferOverflow):
			out[i].Err = fmt.Errorf("%w: an object of %d bytes does not fit the dummy's local buffer", kvstore.InvalidParams, r.Size)
		default:
			out[i].Err = r.Err
		}
	}
	return out
}

// getThroughDaemon reads keys[idx[j]] with capacity caps[j]: into
// parts[idx[j]] in place when parts is given and in registered regions,
// else into staging it lends (returned, to be freed by the caller). A
// BUFFER_OVERFLOW result carries the object's size in Size.
func (d *Dummy) getThroughDaemon(keys []string, idx []int, parts [][]client.Part, caps []uint64) ([]client.GetResult, []staging) {
	res := make([]client.GetResult, len(idx))
	lent := make([]staging, len(idx))
	req := request{Op: opGet, Fit: true}
	var sent []int
	for j, i := range idx {
		var spans []span
		ok := false
		if parts != nil {
			spans, ok = d.spansOf(parts[i])
		}
		if !ok {
			s, got := d.stage(min(caps[j], d.arenaSize()))
			if !got {
				res[j].Err = fmt.Errorf("%w: destination outside registered buffers and no room in the local buffer", kvstore.InvalidParams)
				continue
			}
			lent[j], spans = s, []span{s.span()}
		}
		req.Keys, req.Parts, sent = append(req.Keys, keys[i]), append(req.Parts, spans), append(sent, j)
	}
	if len(sent) == 0 {
		return res, lent
	}
	resp, err := d.call(req)
	for k, j := range sent {
		if err := perKey(resp, err, k); err != nil {
			res[j].Err = err
			if k < len(resp.Needed) && resp.Needed[k] > 0 {
				res[j].Size = resp.Needed[k]
			}
			continue
		}
		res[j].Size = uint64(resp.Codes[k])
	}
	return res, lent
}

func (d *Dummy) arenaSize() uint64 {
	if d.arena == nil {
		return 0
	}
	return d.arena.Size()
}

// cachedInto serves key from the mapped hot cache into parts.
func (d *Dummy) cachedInto(key string, parts []client.Part) (uint64, bool) {
	d.viewMu.RLock()
	defer d.viewMu.RUnlock()
	if d.view == nil {
		return 0, false
	}
	var n uint64
	ok := d.view.Read(key, func(data []byte) bool { n = uint64(len(data)); return scatter(parts, data) })
	return n, ok
}

// cachedCopy returns a copy of key's bytes from the mapped hot cache.
func (d *Dummy) cachedCopy(key string) ([]byte, bool) {
	d.viewMu.RLock()
	defer d.viewMu.RUnlock()
	if d.view == nil {
		return nil, false
	}
	var out []byte
	ok := d.view.Read(key, func(data []byte) bool { out = append(out[:0], data...); return true })
	return out, ok
}

// GetRanges serves get_into_ranges through the daemon.
func (d *Dummy) GetRanges(ranges []client.Range) []client.GetResult {
	out := make([]client.GetResult, len(ranges))
	if !d.life.Enter() {
		return fillResults(out, kvstore.InvalidParams)
	}
	defer d.life.Exit()
	// fits reports whether n bytes may be written at dst: the range does
	// not wrap, and each of this dummy's regions (registered buffers and
	// memory its allocator made) that it touches holds it whole; a range
	// outside them all is the caller's own memory. Every range is checked
	// before any is sent.
	fits := func(dst uintptr, n uint64) bool {
		a := uint64(dst)
		if n == 0 {
			return true
		}
		if a+n < a {
			return false
		}
		d.regMu.Lock()
		defer d.regMu.Unlock()
		for _, rs := range [][]*region{d.regions, d.pool} {
			for _, r := range rs {
				if a < r.base+r.size && r.base < a+n && !r.holds(a, n) {
					return false
				}
			}
		}
		return true
	}
	req := request{Op: opRanges}
	lent := make([]staging, len(ranges))
	defer d.unstage(lent)
	var sent []int
	for i, r := range ranges {
		if r.Dst == 0 && r.Size > 0 || !fits(r.Dst, r.Size) {
			out[i].Err = kvstore.InvalidParams
			continue
		}
		dst := uint64(r.Dst)
		if _, ok := d.spansOf([]client.Part{{Addr: r.Dst, Size: r.Size}}); !ok {
			s, got := d.stage(r.Size)
			if !got {
				out[i].Err = kvstore.InvalidParams
				continue
			}
			lent[i], dst = s, uint64(s.addr)
		}
		req.Ranges, sent = append(req.Ranges, rangeReq{Key: r.Key, Dst: dst, SrcOffset: r.SrcOffset, Size: r.Size}), append(sent, i)
	}
	if len(sent) == 0 {
		return out
	}
	resp, err := d.call(req)
	for k, i := range sent {
		if err := perKey(resp, err, k); err != nil {
			out[i].Err = err
			continue
		}
		out[i].Size = uint64(resp.Codes[k])
		if out[i].Size > ranges[i].Size { // never more than was asked for
			out[i] = client.GetResult{Err: kvstore.InternalError}
			continue
		}
		if lent[i].addr != 0 {
			copy(gpu.HostBytes(ranges[i].Dst, out[i].Size), gpu.HostBytes(lent[i].addr, out[i].Size))
		}
	}
	return out
}

// BatchExist is 1, 0 or a negative code per key.
func (d *Dummy) BatchExist(keys []string) []int {
	return d.perKeyInts(request{Op: opExist, Keys: keys})
}

// BatchRemove removes keys; a code per key.
func (d *Dummy) BatchRemove(keys []string, force bool) []int {
	return d.perKeyInts(request{Op: opRemove, Keys: keys, Force: force})
}

func (d *Dummy) perKeyInts(req request) []int {
	out := make([]int, len(req.Keys))
	if !d.life.Enter() {
		return fillInts(out, int(kvstore.InvalidParams))
	}
	defer d.life.Exit()
	resp, err := d.call(req)
	for i := range out {
		if err := perKey(resp, err, i); err != nil {
			out[i] = int(kvstore.CodeOf(err))
		} else {
			out[i] = int(resp.Codes[i])
		}
	}
	return out
}

// Size is the object's size.
func (d *Dummy) Size(key string) (uint64, error) {
	if !d.life.Enter() {
		return 0, kvstore.InvalidParams
	}
	defer d.life.Exit()
	resp, err := d.call(request{Op: opSize, Keys: []string{key}})
	if err := perKey(resp, err, 0); err != nil {
		return 0, err
	}
	return uint64(resp.Codes[0]), nil
}

// RemoveByRegex removes the keys matching pattern; how many.
func (d *Dummy) RemoveByRegex(pattern string, force bool) (int64, error) {
	return d.count(request{Op: opRemoveRegex, Pattern: pattern, Force: force})
}

// RemoveAll removes every removable object; how many.
func (d *Dummy) RemoveAll(force bool) (int64, error) {
	return d.count(request{Op: opRemoveAll, Force: force})
}

func (d *Dummy) count(req request) (int64, error) {
	if !d.life.Enter() {
		return 0, kvstore.InvalidParams
	}
	defer d.life.Exit()
	resp, err := d.call(req)
	if err != nil {
		return 0, err
	}
	return resp.Count, resp.err()
}

// MetricsText is this dummy's counters and its scope's hot cache counters
// (as the daemon counts them), in Prometheus' text format.
func (d *Dummy) MetricsText() string {
	var b strings.Builder
	metric := func(name, help, kind string, v uint64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", name, help, name, kind, name, v)
	}
	metric("mooncake_dummy_calls_total", "calls forwarded to mooncake_client", "counter", d.calls.Load())
	metric("mooncake_dummy_call_failures_total", "forwarded calls that got no answer", "counter", d.failures.Load())
	metric("mooncake_dummy_reconnects_total", "connections made again after mooncake_client went away", "counter", d.reconnects.Load())
	d.viewMu.RLock()
	var hits, misses uint64
	mapped := d.view != nil
	if mapped {
		hits, misses = d.view.Counts()
	}
	d.viewMu.RUnlock()
	metric("mooncake_dummy_hot_cache_mapped", "1 while the scope's hot cache is mapped here", "gauge", b2u(mapped))
	metric("mooncake_dummy_hot_cache_shm_hits_total", "reads served from the mapped hot cache without a call", "counter", hits)
	metric("mooncake_dummy_hot_cache_shm_misses_total", "mapped hot cache lookups that missed", "counter", misses)
	if d.life.Enter() {
		resp, err := d.call(request{Op: opStats})
		d.life.Exit()
		if err == nil && resp.Stats != nil {
			writeScopeMetrics(&b, []labelled{{"", resp.Stats}})
		}
	}
	return b.String()
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func fillErrs(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func fillResults(out []client.GetResult, err error) []client.GetResult {
	for i := range out {
		out[i].Err = err
	}
	return out
}

func fillInts(out []int, v int) []int {
	for i := range out {
		out[i] = v
	}
	return out
}
