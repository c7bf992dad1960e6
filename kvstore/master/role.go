package master

import (
	"context"
	"time"
)

// This file is the role the admin endpoint reports (GET /role, /status).
// An HA leader says "leader" only once etcd confirms, at the time of the
// request, that the election key is still the one it created: the
// linearizable read that the oplog's fenced batches make on every
// answer. A leader that a standby replaced, or whose lease was revoked,
// therefore stops saying so as soon as that happened in etcd, not when
// its own watch or keepalive notices; the check also steps it down. On
// Redis (--ha_backend_type=redis) the check reads the master view's
// owner_token instead: still this leader's, or not.

// roleCheckTimeout bounds the backend read behind GET /role; a leader that
// cannot confirm its key in that time reports standby (its data path
// cannot answer either).
const roleCheckTimeout = time.Second

// role names what the server is for GET /role: "leader", "standby", or
// "stale" for a master that cannot rebuild the metadata (replication/stale.go).
// With HA it confirms the leadership in the HA backend first (see above).
func (s *Server) role(ctx context.Context) string {
	if !s.IsLeader() {
		if s.rep != nil && s.rep.staleReason() != "" {
			return "stale"
		}
		return "standby"
	}
	f := s.fence.Load()
	if f == nil {
		if s.opts.HA { // elected, not serving yet
			return "standby"
		}
		return "leader"
	}
	cctx, cancel := context.WithTimeout(ctx, roleCheckTimeout)
	defer cancel()
	held, err := f.Held(cctx)
	if err != nil {
		return "standby"
	}
	if !held {
		if s.fence.CompareAndSwap(f, nil) {
			s.leader.Store(false)
			f.Lost()
		}
		return "standby"
	}
	if !s.IsLeader() || s.fence.Load() != f {
		return "standby"
	}
	return "leader"
}
