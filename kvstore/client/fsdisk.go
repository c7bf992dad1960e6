package client

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/fsdir"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// This file is the client's side of the shared-file-system DISK replicas
// (mooncake_master --root_fs_dir): the master names the directory at
// setup; after a put has published its memory replicas, the object's
// bytes are written to the DISK replica's file in the background and the
// replica is published (PutEnd(DISK)) or, when the file cannot be
// written, revoked (PutRevoke(DISK)); a read whose replica is DISK reads
// the file.

// fsWorkers and fsQueue bound the background file writes: a put waits
// for room once fsQueue writes are queued (each holds a copy of its
// object).
const (
	fsWorkers = 2
	fsQueue   = 16
)

// fsSide is the client's DISK replica state.
type fsSide struct {
	dir  string // <root_fs_dir>/<cluster_id>; "" when the master has none
	jobs chan fsJob
	wg   sync.WaitGroup
	once sync.Once
}

// fsJob is one file to write: the object key (as the caller named it)
// and the replica's path relative to dir.
type fsJob struct {
	key, rel string
	data     []byte
}

// setupFS asks the master where the DISK replicas live and starts the
// writers. A master without GetStorageConfig has none.
func (c *Client) setupFS() error {
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().GetStorageConfig(ctx, &pb.GetStorageConfigRequest{})
	if status.Code(err) == grpccodes.Unimplemented {
		return nil
	}
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		return fmt.Errorf("storage config: %w", err)
	}
	if resp.GetFsDir() == "" {
		return nil
	}
	c.fs.dir = resp.GetFsDir()
	c.fs.jobs = make(chan fsJob, fsQueue)
	for range fsWorkers {
		c.fs.wg.Add(1)
		go c.fsWriter()
	}
	return nil
}

// closeFS finishes the queued file writes (publishing or revoking each)
// and stops the writers; the master connection must still be open.
func (c *Client) closeFS() {
	c.fs.once.Do(func() {
		if c.fs.jobs != nil {
			close(c.fs.jobs)
			c.fs.wg.Wait()
		}
	})
}

// fsWriter writes queued files until the queue closes.
func (c *Client) fsWriter() {
	defer c.fs.wg.Done()
	for j := range c.fs.jobs {
		err := fsdir.WriteFile(c.fs.dir, j.rel, j.data)
		ctx, cancel := rpcContext()
		var code int32
		var rerr error
		if err == nil {
			var r *pb.StatusResponse
			r, rerr = c.master.client().PutEnd(ctx, &pb.PutEndRequest{ClientId: c.id, Key: j.key, ReplicaType: pb.ReplicaType_REPLICA_DISK})
			code = r.GetErrorCode()
		} else {
			slog.Warn("DISK replica not written; revoked", "key", j.key, "path", j.rel, "err", err)
			c.revokeFS(j.key)
		}
		cancel()
		if err == nil && (rerr != nil || code != 0) {
			// The object was removed or overwritten meanwhile: the file
			// is no replica.
			fsdir.Remove(c.fs.dir, j.rel)
		}
	}
}

// revokeFS drops key's PROCESSING DISK replica at the master.
func (c *Client) revokeFS(key string) {
	ctx, cancel := rpcContext()
	defer cancel()
	c.master.client().PutRevoke(ctx, &pb.PutRevokeRequest{ClientId: c.id, Key: key, ReplicaType: pb.ReplicaType_REPLICA_DISK})
}

// splitFS separates a PutStart answer's memory replicas from its DISK
// replica (nil when none).
func splitFS(rs []*pb.ReplicaDescriptor) (mem []*pb.ReplicaDescriptor, disk *pb.ReplicaDescriptor) {
	for _, r := range rs {
		if r.GetReplicaType() == pb.ReplicaType_REPLICA_DISK {
			disk = r
		} else {
			mem = append(mem, r)
		}
	}
	return mem, disk
}

// queueFS copies the object held by parts (the caller may reuse them once
// the put returns) and queues its file write to disk's path; without a
// directory, or when the copy fails, the replica is revoked at once.
func (c *Client) queueFS(key string, parts []Part, disk *pb.ReplicaDescriptor) {
	if c.fs.dir == "" || fsdir.ValidRelPath(disk.GetFilePath()) != nil {
		c.revokeFS(key)
		return
	}
	data := make([]byte, partsSize(parts))
	if err := copyIn(c.engine.Memory(), data, parts, 0); err != nil {
		c.revokeFS(key)
		return
	}
	c.fs.jobs <- fsJob{key: key, rel: disk.GetFilePath(), data: data}
}

// readFS reads the first n bytes of a DISK replica's file into parts. The
// file must hold exactly the replica's size; a missing or short file is
// FILE_NOT_FOUND.
func (c *Client) readFS(parts []Part, r *pb.ReplicaDescriptor, n uint64) error {
	if c.fs.dir == "" {
		return fmt.Errorf("%w: DISK replica %s but the master named no directory", kvstore.FileNotFound, r.GetFilePath())
	}
	buf := make([]byte, r.GetSize())
	if err := fsdir.ReadFile(c.fs.dir, r.GetFilePath(), buf); err != nil {
		if errors.Is(err, fsdir.ErrBadPath) {
			return fmt.Errorf("%w: %v", kvstore.InvalidParams, err)
		}
		return fmt.Errorf("%w: %v", kvstore.FileNotFound, err)
	}
	if err := copyOut(c.engine.Memory(), trim(parts, n), 0, buf[:min(n, uint64(len(buf)))]); err != nil {
		return transferErr(err)
	}
	return nil
}

// DiskFilePath is where a DISK replica's file (rel, as its descriptor's
// file_path names it) lives on this client: under the directory the
// master named; "" without one.
func (c *Client) DiskFilePath(rel string) string {
	if c.fs.dir == "" || rel == "" {
		return ""
	}
	return c.fs.dir + "/" + rel
}
