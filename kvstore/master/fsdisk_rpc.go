package master

import (
	"context"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/fsdir"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// This file translates the shared-file-system DISK replica RPCs (and the
// replica type of PutEnd/PutRevoke) to State calls, and deletes the files
// of dropped replicas.

// endWrite is PutEnd for the replica type req names.
func endWrite(st *State, req *masterpb.PutEndRequest, key string, now time.Time) kvstore.ErrorCode {
	if req.GetReplicaType() == masterpb.ReplicaType_REPLICA_DISK {
		return st.PutEndDisk(req.GetClientId(), key, now)
	}
	return st.PutEnd(req.GetClientId(), key, req.Checksum, now)
}

// revokeWrite is PutRevoke for the replica type req names.
func revokeWrite(st *State, req *masterpb.PutRevokeRequest, key string, now time.Time) kvstore.ErrorCode {
	if req.GetReplicaType() == masterpb.ReplicaType_REPLICA_DISK {
		return st.PutRevokeDisk(req.GetClientId(), key, now)
	}
	return st.PutRevoke(req.GetClientId(), key, now)
}

// GetStorageConfig implements masterpb.MasterServer: the directory of the
// DISK replicas, "" when the master runs without --root_fs_dir.
func (s *Server) GetStorageConfig(ctx context.Context, _ *masterpb.GetStorageConfigRequest) (*masterpb.GetStorageConfigResponse, error) {
	if err := s.do(func(*State, time.Time) {}); err != nil {
		return nil, err
	}
	fs := s.opts.Config.FS
	return &masterpb.GetStorageConfigResponse{FsDir: fs.Dir(), GlobalFileSegmentSize: fs.GlobalFileSegmentSize}, nil
}

// deleteFSFiles deletes the files of dropped DISK replicas, when this
// master reaches the shared directory; a failure is only logged (a file
// left behind is never listed as a replica again: every write has its
// own file name).
func (s *Server) deleteFSFiles(rels []string) {
	dir := s.opts.Config.FS.Dir()
	for _, rel := range rels {
		if err := fsdir.Remove(dir, rel); err != nil {
			s.log.Debug("DISK replica file not deleted", "path", rel, "err", err)
		}
	}
}
