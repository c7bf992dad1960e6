package client

import (
	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// PutOptions select how a put behaves.
type PutOptions struct {
	// Upsert overwrites an existing object; a plain put of an existing key
	// succeeds without overwriting (upstream semantics).
	Upsert bool
	// ZeroCopy moves bytes straight from the caller's memory; otherwise
	// they are staged through the local buffer.
	ZeroCopy bool
}

// Put stores key as the concatenation of parts.
func (c *Client) Put(key string, parts []Part, cfg ReplicateConfig, opt PutOptions) error {
	return c.BatchPut([]string{key}, [][]Part{parts}, cfg, opt)[0]
}

// BatchPut stores several objects with one master round trip per phase.
// The result for each key is nil or an error carrying its ErrorCode.
func (c *Client) BatchPut(keys []string, parts [][]Part, cfg ReplicateConfig, opt PutOptions) []error {
	errs := make([]error, len(keys))
	defer c.trace.api("put", keys, totalSize(parts)).endErrs(errs)
	if !c.life.Enter() {
		return fill(errs, kvstore.InvalidParams)
	}
	defer c.life.Exit()
	if len(parts) != len(keys) {
		return fill(errs, kvstore.InvalidParams)
	}
	if !opt.ZeroCopy && cfg.PreferAllocInSameNode {
		return fill(errs, kvstore.InvalidParams) // upstream: copying put rejects it
	}
	if cfg.GroupIDs != nil && len(cfg.GroupIDs) != len(keys) {
		return fill(errs, kvstore.InvalidParams) // upstream: one group id per key
	}
	var starts []*pb.PutStartRequest
	var idx []int
	pcfg := c.placement(cfg)
	for i, k := range keys {
		size := partsSize(parts[i])
		switch {
		case k == "" || !validParts(parts[i]):
			errs[i] = kvstore.InvalidParams
		case size == 0 && opt.ZeroCopy:
			// upstream put_from: size 0 stores nothing and succeeds
		case size == 0 || (!opt.ZeroCopy && c.staging.size == 0):
			errs[i] = kvstore.InvalidParams
		default:
			starts = append(starts, &pb.PutStartRequest{ClientId: c.id, Key: k, Size: size, Config: pcfg, GroupId: cfg.groupID(i)})
			idx = append(idx, i)
		}
	}
	if len(starts) > 0 && !opt.Upsert && placesNothing(pcfg) && !envvars.StoreTwoPhasePut.Enabled() {
		starts, idx = c.putReserved(starts, idx, parts, opt, errs)
	}
	if len(starts) == 0 {
		return errs
	}
	ctx, cancel := rpcContext()
	req := &pb.BatchPutStartRequest{Items: starts}
	var resp *pb.BatchPutStartResponse
	var err error
	if opt.Upsert {
		resp, err = c.master.client().BatchUpsertStart(ctx, req)
	} else {
		resp, err = c.master.client().BatchPutStart(ctx, req)
	}
	cancel()
	if err != nil || len(resp.GetItems()) != len(starts) {
		for _, i := range idx {
			errs[i] = rpcResult(0, firstNonNil(err, kvstore.RPCFail))
		}
		return errs
	}
	// Move the bytes of every started object, all objects in parallel.
	moved := make([]error, len(starts))
	started := make([]bool, len(starts))                // replicas reserved: end or revoke
	sums := make([]*uint64, len(starts))                // when checksums are on
	disks := make([]*pb.ReplicaDescriptor, len(starts)) // DISK replicas (fsdisk.go)
	parallel(len(starts), func(j int) error {
		item := resp.Items[j]
		code := kvstore.ErrorCode(item.GetErrorCode())
		var mem []*pb.ReplicaDescriptor
		mem, disks[j] = splitFS(item.GetReplicas())
		switch {
		case code == kvstore.ObjectAlreadyExists && !opt.Upsert:
			moved[j] = errAlreadyThere
		case code != kvstore.OK:
			moved[j] = code
		case len(mem) == 0:
			moved[j] = kvstore.NoAvailableHandle
		default:
			started[j] = true
			moved[j] = c.writeReplicas(parts[idx[j]], mem, 0, !opt.ZeroCopy)
			if moved[j] == nil && checksumEnabled() {
				sum, err := checksum(c.engine.Memory(), parts[idx[j]])
				if err != nil {
					moved[j] = transferErr(err)
				} else {
					sums[j] = &sum
				}
			}
		}
		return nil
	})
	var ends []*pb.PutEndRequest
	var revokes []*pb.PutRevokeRequest
	var endIdx, endStart []int
	for j, s := range starts {
		i := idx[j]
		switch {
		case moved[j] == errAlreadyThere:
			errs[i] = nil
		case moved[j] == nil:
			end := &pb.PutEndRequest{ClientId: c.id, Key: s.Key, Checksum: sums[j]}
			ends = append(ends, end)
			endIdx = append(endIdx, i)
			endStart = append(endStart, j)
		case started[j]:
			revokes = append(revokes, &pb.PutRevokeRequest{ClientId: c.id, Key: s.Key})
			errs[i] = moved[j]
		default:
			errs[i] = moved[j]
		}
	}
	if len(ends) > 0 {
		ctx, cancel := rpcContext()
		r, err := c.master.client().BatchPutEnd(ctx, &pb.BatchPutEndRequest{Items: ends})
		cancel()
		for k, i := range endIdx {
			if err != nil || k >= len(r.GetErrorCodes()) {
				errs[i] = rpcResult(0, firstNonNil(err, kvstore.RPCFail))
			} else {
				errs[i] = kvstore.ErrorCode(r.ErrorCodes[k]).Err()
			}
		}
		for k, i := range endIdx {
			if j := endStart[k]; errs[i] == nil && disks[j] != nil {
				c.queueFS(ends[k].Key, parts[i], disks[j])
			}
		}
	}
	if len(revokes) > 0 {
		ctx, cancel := rpcContext()
		c.master.client().BatchPutRevoke(ctx, &pb.BatchPutRevokeRequest{Items: revokes})
		cancel()
	}
	return errs
}

// validParts rejects a NULL address with a non-zero size (a caller's
// mistake that would otherwise crash the process).
func validParts(parts []Part) bool {
	for _, p := range parts {
		if p.Addr == 0 && p.Size > 0 {
			return false
		}
	}
	return true
}

// errAlreadyThere marks a plain put of an existing key: a silent success.
var errAlreadyThere = kvstore.ObjectAlreadyExists

func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func firstNonNil(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
