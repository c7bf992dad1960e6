package client

import (
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// BatchExist reports for each key 1 (a readable replica exists), 0, or a
// negative ErrorCode. Like upstream, it grants read leases.
func (c *Client) BatchExist(keys []string) []int {
	out := make([]int, len(keys))
	defer c.trace.api("exist", keys, 0).endInts(out)
	if !c.life.Enter() {
		return fillInt(out, int(kvstore.InvalidParams))
	}
	defer c.life.Exit()
	ctx, cancel := rpcContext()
	defer cancel()
	failed := func(err error) int { return int(kvstore.CodeOf(rpcResult(0, firstNonNil(err, kvstore.RPCFail)))) }
	req := &pb.BatchKeyRequest{Keys: keys}
	// The packed answer first; BatchExistKey on a master without it.
	if !c.master.noExistCodes.Load() {
		resp, err := c.master.client().BatchExistCodes(ctx, req)
		if status.Code(err) != grpccodes.Unimplemented {
			for i := range out {
				if err != nil || i >= len(resp.GetCodes()) {
					out[i] = failed(err)
				} else {
					out[i] = int(resp.Codes[i])
				}
			}
			return out
		}
		c.master.noExistCodes.Store(true)
	}
	resp, err := c.master.client().BatchExistKey(ctx, req)
	for i := range out {
		switch {
		case err != nil || i >= len(resp.GetItems()):
			out[i] = failed(err)
		case resp.Items[i].ErrorCode != 0:
			out[i] = int(resp.Items[i].ErrorCode)
		case resp.Items[i].Exists:
			out[i] = 1
		}
	}
	return out
}

// Size returns the size of key's first readable replica.
func (c *Client) Size(key string) (_ uint64, err error) {
	defer c.trace.api("get_size", []string{key}, 0).endErr(&err)
	lists, _ := c.replicaLists([]string{key})
	if code := kvstore.ErrorCode(lists[0].GetErrorCode()); code != kvstore.OK {
		return 0, code
	}
	r := c.pickReplica(lists[0].Replicas)
	if r == nil {
		return 0, kvstore.ObjectNotFound
	}
	return r.Size, nil
}

// BatchRemove removes keys; leased objects need force.
func (c *Client) BatchRemove(keys []string, force bool) []int {
	out := make([]int, len(keys))
	defer c.trace.api("remove", keys, 0).endInts(out)
	if !c.life.Enter() {
		return fillInt(out, int(kvstore.InvalidParams))
	}
	defer c.life.Exit()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().BatchRemove(ctx, &pb.BatchRemoveRequest{Keys: keys, Force: force})
	for i := range out {
		if err != nil || i >= len(resp.GetErrorCodes()) {
			out[i] = int(kvstore.CodeOf(rpcResult(0, firstNonNil(err, kvstore.RPCFail))))
		} else {
			out[i] = int(resp.ErrorCodes[i])
		}
	}
	return out
}

// RemoveByRegex removes every key matching pattern and returns how many.
func (c *Client) RemoveByRegex(pattern string, force bool) (_ int64, err error) {
	defer c.trace.api("remove_by_regex", nil, 0).endErr(&err)
	if !c.life.Enter() {
		return 0, kvstore.InvalidParams
	}
	defer c.life.Exit()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().RemoveByRegex(ctx, &pb.RemoveByRegexRequest{Pattern: pattern, Force: force})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// RemoveAll removes every removable object and returns how many.
func (c *Client) RemoveAll(force bool) (_ int64, err error) {
	defer c.trace.api("remove_all", nil, 0).endErr(&err)
	if !c.life.Enter() {
		return 0, kvstore.InvalidParams
	}
	defer c.life.Exit()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().RemoveAll(ctx, &pb.RemoveAllRequest{Force: force})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return 0, err
	}
	return resp.Count, nil
}

// RegisterBuffer registers caller memory for zero-copy transfers.
func (c *Client) RegisterBuffer(addr uintptr, size uint64) error {
	if !c.life.Enter() {
		return kvstore.InvalidParams
	}
	defer c.life.Exit()
	if err := c.engine.RegisterLocalOnly(addr, size); err != nil {
		return kvstore.InvalidParams
	}
	return nil
}

// UnregisterBuffer withdraws memory from RegisterBuffer.
func (c *Client) UnregisterBuffer(addr uintptr) error {
	if !c.life.Enter() {
		return kvstore.InvalidParams
	}
	defer c.life.Exit()
	if err := c.engine.UnregisterLocalMemory(addr); err != nil {
		return kvstore.InvalidParams
	}
	return nil
}

func fillInt(out []int, v int) []int {
	for i := range out {
		out[i] = v
	}
	return out
}
