package client

import (
	"fmt"
	"sync"

	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
	"github.com/mooncake-go/mooncake/transfer"
)

// TaskID is a copy or move task's id (a UUID's two halves).
type TaskID struct{ Hi, Lo uint64 }

// CreateCopyTask asks the master to copy key to the segments named in
// targets; the client holding the source replica does the copy.
func (c *Client) CreateCopyTask(key string, targets []string) (TaskID, error) {
	if !c.life.Enter() {
		return TaskID{}, errClientClosed
	}
	defer c.life.Exit()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().CreateCopyTask(ctx, &pb.CreateCopyTaskRequest{Key: key, Targets: targets})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return TaskID{}, err
	}
	return TaskID{resp.GetId().GetHi(), resp.GetId().GetLo()}, nil
}

// CreateMoveTask asks the master to move key's replica on segment source
// to segment target.
func (c *Client) CreateMoveTask(key, source, target string) (TaskID, error) {
	if !c.life.Enter() {
		return TaskID{}, errClientClosed
	}
	defer c.life.Exit()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().CreateMoveTask(ctx, &pb.CreateMoveTaskRequest{Key: key, Source: source, Target: target})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return TaskID{}, err
	}
	return TaskID{resp.GetId().GetHi(), resp.GetId().GetLo()}, nil
}

// QueryTask returns the master's view of a task.
func (c *Client) QueryTask(id TaskID) (*pb.QueryTaskResponse, error) {
	if !c.life.Enter() {
		return nil, errClientClosed
	}
	defer c.life.Exit()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().QueryTask(ctx, &pb.QueryTaskRequest{Id: &pb.TaskId{Hi: id.Hi, Lo: id.Lo}})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return nil, err
	}
	return resp, nil
}

// BatchReplicaClear clears this client's objects among keys (only their
// replicas on segment, when it is not "") and returns which were cleared.
func (c *Client) BatchReplicaClear(keys []string, segment string) ([]bool, error) {
	if !c.life.Enter() {
		return nil, errClientClosed
	}
	defer c.life.Exit()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().BatchReplicaClear(ctx, &pb.BatchReplicaClearRequest{ClientId: c.id, Keys: keys, SegmentName: segment})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	for _, i := range resp.GetCleared() {
		if int(i) < len(out) {
			out[i] = true
		}
	}
	return out, nil
}

// runningTasks holds the ids of the tasks this client is executing: the
// master hands an unreported task out again, and a copy still in flight
// must not start twice.
type runningTasks struct {
	mu  sync.Mutex
	ids map[TaskID]bool
}

// start records id as running; false if it runs already.
func (r *runningTasks) start(id TaskID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids[id] {
		return false
	}
	if r.ids == nil {
		r.ids = map[TaskID]bool{}
	}
	r.ids[id] = true
	return true
}

func (r *runningTasks) done(id TaskID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ids, id)
}

// runTasks executes tasks the master assigned to this client in a Ping
// answer, each on its own goroutine, and reports each outcome.
func (c *Client) runTasks(tasks []*pb.TaskAssignment) {
	for _, t := range tasks {
		id := TaskID{t.GetId().GetHi(), t.GetId().GetLo()}
		if !c.tasks.start(id) {
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer c.tasks.done(id)
			err := c.copyReplica(t)
			msg := "copied to " + fmt.Sprint(len(t.GetTargets())) + " target(s)"
			if err != nil {
				msg = err.Error()
			}
			ctx, cancel := rpcContext()
			defer cancel()
			c.master.client().MarkTaskComplete(ctx, &pb.MarkTaskCompleteRequest{
				ClientId: c.id, Id: t.GetId(), Success: err == nil, Message: msg})
		}()
	}
}

// copyReplica writes the task's source replica, which lives in one of this
// client's own segments, to every target buffer.
func (c *Client) copyReplica(t *pb.TaskAssignment) (err error) {
	defer c.trace.phase("task.copy", nil, t.GetSize()*uint64(len(t.GetTargets()))).endErr(&err)
	src := t.GetSource()
	if !c.ownsRange(src.GetBufferAddress(), t.GetSize()) {
		return fmt.Errorf("source replica at %#x is not in a segment of this client", src.GetBufferAddress())
	}
	targets := t.GetTargets()
	return parallel(len(targets), func(i int) error {
		req := transfer.Request{Opcode: transfer.OpWrite, Source: uintptr(src.GetBufferAddress()),
			TargetOffset: targets[i].GetBufferAddress(), Length: t.GetSize()}
		if err := c.engine.TransferSync(targets[i].GetTransportEndpoint(), []transfer.Request{req}); err != nil {
			return fmt.Errorf("copy to %s: %w", targets[i].GetSegmentName(), err)
		}
		return nil
	})
}

// ownsRange reports whether [addr, addr+n) lies inside one of this
// client's mounted segments.
func (c *Client) ownsRange(addr, n uint64) bool {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	for _, s := range c.segments {
		if addr >= s.Base && addr-s.Base+n <= s.Size {
			return true
		}
	}
	return false
}
