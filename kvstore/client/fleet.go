package client

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// This file holds the Store-RS segment lifecycle of a client's own
// segments (docs/store-operations.md): modes, drains that move replicas
// to other segments, retirement, handoff plans, and memory expansion.

// evacuationPoll is how long a drain waits between evacuation passes; the
// moves themselves run on this client as soon as a pass starts them.
const evacuationPoll = 50 * time.Millisecond

// segmentModes remembers the modes set on this client's segments, so
// that a remount (a restarted master knows them as ACTIVE) sets them again.
type segmentModes struct {
	mu    sync.Mutex
	modes map[string]pb.SegmentMode
}

func (s *segmentModes) set(id string, m pb.SegmentMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.modes == nil {
		s.modes = map[string]pb.SegmentMode{}
	}
	if m == pb.SegmentMode_SEGMENT_ACTIVE {
		delete(s.modes, id)
	} else {
		s.modes[id] = m
	}
}

// of returns the mode set on segment id (ACTIVE when none was).
func (s *segmentModes) of(id string) pb.SegmentMode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.modes[id]
}

func (s *segmentModes) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.modes, id)
}

// reapply sets the remembered modes again after a remount.
func (s *segmentModes) reapply(c *Client) {
	s.mu.Lock()
	modes := make(map[string]pb.SegmentMode, len(s.modes))
	for id, m := range s.modes {
		modes[id] = m
	}
	s.mu.Unlock()
	for id, m := range modes {
		if err := c.setMode(id, m); err != nil {
			slog.Warn("store client: setting a segment mode again after a remount failed", "segment", id, "mode", m, "err", err)
		}
	}
}

// SegmentIDs returns the ids of this client's mounted segments, in mount
// order (the setup segment first).
func (c *Client) SegmentIDs() []string {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	ids := make([]string, len(c.segments))
	for i, s := range c.segments {
		ids[i] = s.Id
	}
	return ids
}

// ownIDs checks that ids are this client's segments; none means all.
func (c *Client) ownIDs(ids []string) ([]string, error) {
	own := c.SegmentIDs()
	if len(ids) == 0 {
		if len(own) == 0 {
			return nil, fmt.Errorf("%w: this client has no segment", kvstore.SegmentNotFound)
		}
		return own, nil
	}
	for _, id := range ids {
		if !slices.Contains(own, id) {
			return nil, fmt.Errorf("%w: segment %q is not mounted by this client", kvstore.SegmentNotFound, id)
		}
	}
	return ids, nil
}

// SetSegmentMode puts segments ids (all of this client's when empty) in
// mode: ACTIVE takes new replicas; STANDBY and DRAINING serve reads only;
// RETIRED is final. It stops at the first failure.
func (c *Client) SetSegmentMode(ids []string, mode pb.SegmentMode) (err error) {
	defer c.trace.api("set_segment_mode", ids, 0).endErr(&err)
	if !c.life.Enter() {
		return errClientClosed
	}
	defer c.life.Exit()
	ids, err = c.ownIDs(ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := c.setMode(id, mode); err != nil {
			return fmt.Errorf("segment %s: %w", id, err)
		}
	}
	return nil
}

func (c *Client) setMode(id string, mode pb.SegmentMode) error {
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().SetSegmentMode(ctx, &pb.SetSegmentModeRequest{ClientId: c.id, SegmentId: id, Mode: mode})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return err
	}
	c.modes.set(id, mode)
	return nil
}

// EvacuationReport sums the passes of an evacuation.
type EvacuationReport struct {
	Segments []string `json:"segments"`
	// Moves is how many move tasks the passes started (a task that failed
	// because the object changed is started again, and counted again).
	Moves int `json:"moves"`
	// Dropped replicas had a replica elsewhere and no room for a copy.
	Dropped int `json:"dropped"`
	Passes  int `json:"passes"`
}

// Evacuate moves every replica off segments ids (all of this client's
// when empty), which must not be ACTIVE, and returns when they are empty
// and no reader can still hold one of their buffers; timeout bounds the
// wait (the error then says what is left). Reads succeed throughout: a
// replica leaves its segment only once its copy is readable elsewhere,
// and its buffer stays until the read leases on it end.
func (c *Client) Evacuate(ids []string, timeout time.Duration) (_ EvacuationReport, err error) {
	defer c.trace.api("evacuate_owned_replicas", ids, 0).endErr(&err)
	if !c.life.Enter() {
		return EvacuationReport{}, errClientClosed
	}
	defer c.life.Exit()
	ids, err = c.ownIDs(ids)
	if err != nil {
		return EvacuationReport{}, err
	}
	return c.evacuate(ids, timeout)
}

func (c *Client) evacuate(ids []string, timeout time.Duration) (EvacuationReport, error) {
	rep := EvacuationReport{Segments: ids}
	deadline := time.Now().Add(timeout)
	for {
		rep.Passes++
		var left []string
		for _, id := range ids {
			ev, err := c.evacuationPass(id)
			if err != nil {
				return rep, fmt.Errorf("segment %s: %w", id, err)
			}
			rep.Moves += int(ev.GetStarted())
			rep.Dropped += int(ev.GetDropped())
			if ev.GetRemaining() > 0 || ev.GetMoving() > 0 || ev.GetQuarantined() > 0 {
				left = append(left, fmt.Sprintf("%s: %d replicas (%d moving, %d unplaceable), %d buffers readers may hold",
					id, ev.GetRemaining(), ev.GetMoving(), ev.GetUnplaceable(), ev.GetQuarantined()))
			}
			if ev.GetStarted() > 0 {
				c.fetchTasks() // run the moves now, not at the next heartbeat
			}
		}
		if len(left) == 0 {
			return rep, nil
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("%w: evacuation not finished after %s: %v", kvstore.RPCTimeout, timeout, left)
		}
		select {
		case <-c.stop:
			return rep, errClientClosed
		case <-time.After(evacuationPoll):
		}
	}
}

func (c *Client) evacuationPass(id string) (*pb.EvacuateSegmentResponse, error) {
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().EvacuateSegment(ctx, &pb.UnmountSegmentRequest{ClientId: c.id, SegmentId: id})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		if kvstore.CodeOf(err) == kvstore.UnavailableInCurrentStatus {
			return nil, fmt.Errorf("%w: the segment is ACTIVE; put it in standby or draining first", err)
		}
		return nil, err
	}
	return resp, nil
}

// fetchTasks pings the master to receive and start the tasks assigned to
// this client at once.
func (c *Client) fetchTasks() {
	ctx, cancel := rpcContext()
	resp, err := c.master.client().Ping(ctx, &pb.PingRequest{ClientId: c.id, Incarnation: incarnation})
	cancel()
	if err == nil && resp.GetErrorCode() == 0 {
		c.runTasks(resp.GetTasks())
	}
}

// Drain puts segments ids (all of this client's when empty) in DRAINING
// and evacuates them (Evacuate). They stay mounted, serving nothing, until
// activated again or retired.
func (c *Client) Drain(ids []string, timeout time.Duration) (_ EvacuationReport, err error) {
	defer c.trace.api("drain_segment", ids, 0).endErr(&err)
	if err := c.SetSegmentMode(ids, pb.SegmentMode_SEGMENT_DRAINING); err != nil {
		return EvacuationReport{}, err
	}
	return c.Evacuate(ids, timeout)
}

// Retire takes segment id out of the pool for good: RETIRED (no new
// replicas, never ACTIVE again), evacuated, then unmounted and its memory
// released.
func (c *Client) Retire(id string, timeout time.Duration) (_ EvacuationReport, err error) {
	defer c.trace.api("retire_segment", []string{id}, 0).endErr(&err)
	if err := c.SetSegmentMode([]string{id}, pb.SegmentMode_SEGMENT_RETIRED); err != nil {
		return EvacuationReport{}, err
	}
	rep, err := c.Evacuate([]string{id}, timeout)
	if err != nil {
		return rep, err
	}
	if !c.life.Enter() {
		return rep, errClientClosed
	}
	defer c.life.Exit()
	c.modes.forget(id)
	return rep, c.unmountRetired(id)
}

// unmountRetired unmounts an evacuated segment: one mounted after setup
// the way Unmount does, the setup segment by hand.
func (c *Client) unmountRetired(id string) error {
	c.segMu.Lock()
	if m, ok := c.mounts[id]; ok {
		c.segMu.Unlock()
		return c.unmountOne(id, m.allocated)
	}
	i := slices.IndexFunc(c.segments, func(s *pb.Segment) bool { return s.Id == id })
	if i < 0 {
		c.segMu.Unlock()
		return fmt.Errorf("%w: segment %q is not mounted by this client", kvstore.SegmentNotFound, id)
	}
	seg := c.segments[i]
	c.segments = slices.Delete(c.segments, i, i+1)
	c.segMu.Unlock()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().UnmountSegment(ctx, &pb.UnmountSegmentRequest{ClientId: c.id, SegmentId: id})
	c.segMu.Lock()
	c.releaseSegmentMemory(seg)
	c.segMu.Unlock()
	return rpcResult(resp.GetErrorCode(), err)
}

// PlanHandoff asks the master where the replicas on segments ids (all of
// this client's when empty) would go if they were evacuated now; it moves
// nothing.
func (c *Client) PlanHandoff(ids []string) (_ *pb.PlanHandoffResponse, err error) {
	defer c.trace.api("plan_handoff", ids, 0).endErr(&err)
	if !c.life.Enter() {
		return nil, errClientClosed
	}
	defer c.life.Exit()
	ids, err = c.ownIDs(ids)
	if err != nil {
		return nil, err
	}
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().PlanHandoff(ctx, &pb.PlanHandoffRequest{ClientId: c.id, SegmentIds: ids})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return nil, err
	}
	return resp, nil
}
