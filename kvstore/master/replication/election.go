package replication

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/internal/redis"
)

// DefaultClusterID is the cluster id when neither --cluster_id nor
// MC_STORE_CLUSTER_ID is set.
const DefaultClusterID = "mooncake_cluster"

// MasterViewLeaseTTL is the etcd lease of the master view key, in seconds
// (upstream DEFAULT_MASTER_VIEW_LEASE_TTL_SEC).
const MasterViewLeaseTTL = 5

// MasterViewKey is the etcd key holding the leader's address for a
// cluster: mooncake-store/<cluster_id>/master_view.
func MasterViewKey(clusterID string) string {
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	return "mooncake-store/" + clusterID + "/master_view"
}

// ParseEndpoints splits an etcd connection string ("h1:2379;h2:2379" or
// comma-separated, optionally with an etcd:// prefix) into endpoints.
func ParseEndpoints(s string) []string {
	s = strings.TrimPrefix(strings.TrimSpace(s), "etcd://")
	var out []string
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' }) {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// HAConfig configures leader election.
type HAConfig struct {
	// Endpoints are the etcd client URLs.
	Endpoints []string
	// Redis, when not nil, runs the election on this Redis server instead
	// of etcd (--ha_backend_type=redis; redis_election.go): Endpoints and
	// TLS are unused, and the oplog is not available.
	Redis *redis.Options
	// TLS, when not nil, is the etcd client's TLS configuration (used
	// with https:// endpoints; see tlsconf.ForEtcd).
	TLS *tls.Config
	// ClusterID selects the master view key.
	ClusterID string
	// Advertise is the address written into the master view key: the
	// leader's rpc_address:rpc_port that clients dial.
	Advertise string
	// LeaseTTL is the master view lease in seconds; MasterViewLeaseTTL
	// when zero.
	LeaseTTL int
	// Grace is how long a newly elected leader waits before serving, so
	// that a deposed leader whose lease ran out has stopped (upstream
	// waits one lease TTL). Zero means no wait; negative is the upstream
	// default of LeaseTTL seconds. With Oplog there is no wait: fencing
	// makes a deposed leader unable to answer.
	Grace time.Duration
	// Oplog replicates the metadata through an operation log in etcd
	// (--enable_oplog): standbys apply it and a promoted one serves the
	// same objects. RunElection then needs the master's Log.
	Oplog bool
	// OplogBatchMaxEntries caps the entries of one batch
	// (--oplog_batch_max_entries).
	OplogBatchMaxEntries int
	// OplogPipelineDepth is how many batches the leader writes to etcd at
	// once (--oplog_pipeline_depth); DefaultOplogPipelineDepth when zero.
	// More than one hides etcd's latency when it, not etcd's CPU, is the
	// limit (docs/store-durability.md).
	OplogPipelineDepth int
	// OplogRetryTimeout is how long a batch write retries etcd errors
	// before the leader gives up its leadership
	// (--batch_oplog_retry_timeout_sec).
	OplogRetryTimeout time.Duration
	// OplogPollInterval is how often a standby re-reads the log besides
	// watching it (--oplog_poll_interval_ms).
	OplogPollInterval time.Duration
	// Snapshot, when not nil, adds metadata snapshots to the oplog
	// (snapshot.go).
	Snapshot *SnapshotConfig
}

// Check refuses a configuration the election cannot run: the oplog on
// Redis.
func (c HAConfig) Check() error {
	if c.Redis != nil && c.Oplog {
		return errOplogOnRedis
	}
	return nil
}

// Defaults of the oplog settings (upstream's flag defaults).
const (
	DefaultOplogBatchMaxEntries = 1000
	DefaultOplogPipelineDepth   = 1
	DefaultOplogRetryTimeout    = 10 * time.Second
	DefaultOplogPollInterval    = time.Second
)

// Node is what the election drives: the master that serves while it
// leads. Without the oplog it serves from the moment it is elected; with
// it, the Log's promotion starts the serving (StateMachine.Serve).
type Node interface {
	// SetLeader makes the node serve as the leader of view version, or
	// stop serving (false, 0), from an empty state.
	SetLeader(leader bool, version uint64)
	// SetFence records the leadership GET /role confirms (nil: none).
	SetFence(f *Fence)
}

// elector runs the election loop for one master.
type elector struct {
	cfg HAConfig
	srv Node
	rep *Log // nil without the oplog
	log *slog.Logger
	cli *clientv3.Client
	key string
	// stopTail stops the oplog tailer while a standby runs one.
	stopTail func()
}

// RunElection campaigns for the master view key until ctx ends, switching
// srv between leader and standby; with the oplog (rep not nil) it runs
// rep's tailer while standing by and promotes rep when elected. With
// cfg.Redis it runs the Redis election (redis_election.go) instead; on
// etcd it follows upstream's protocol: create
// the key with a lease only if absent (a transaction); the winner keeps
// the lease alive and serves; the others watch the key until it is
// deleted and try again. On return the lease is revoked, so a leader
// that stops hands over at once.
func RunElection(ctx context.Context, cfg HAConfig, srv Node, rep *Log, log *slog.Logger) error {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = MasterViewLeaseTTL
	}
	if cfg.Grace < 0 {
		cfg.Grace = time.Duration(cfg.LeaseTTL) * time.Second
	}
	if err := cfg.Check(); err != nil {
		return err
	}
	if cfg.Redis != nil {
		return runRedisElection(ctx, cfg, srv, log)
	}
	if len(cfg.Endpoints) == 0 {
		return fmt.Errorf("HA: no etcd endpoints")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.Endpoints, TLS: cfg.TLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("HA: etcd client: %w", err)
	}
	defer cli.Close()
	e := &elector{cfg: cfg, srv: srv, rep: rep, log: log, cli: cli, key: MasterViewKey(cfg.ClusterID)}
	if rep != nil {
		if cfg.OplogBatchMaxEntries <= 0 {
			e.cfg.OplogBatchMaxEntries = DefaultOplogBatchMaxEntries
		}
		if cfg.OplogPipelineDepth <= 0 {
			e.cfg.OplogPipelineDepth = DefaultOplogPipelineDepth
		}
		if cfg.OplogRetryTimeout <= 0 {
			e.cfg.OplogRetryTimeout = DefaultOplogRetryTimeout
		}
		if cfg.OplogPollInterval <= 0 {
			e.cfg.OplogPollInterval = DefaultOplogPollInterval
		}
		e.startTail()
		defer func() { e.stopTail() }()
	}
	for ctx.Err() == nil {
		if err := e.round(ctx); err != nil && ctx.Err() == nil {
			log.Warn("HA election round failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// round is one attempt: win and serve until leadership is lost, or lose
// and wait until the key is gone.
func (e *elector) round(ctx context.Context) error {
	if e.rep != nil {
		if err := e.rep.mayLead(); err != nil {
			return fmt.Errorf("not standing for election: %w", err)
		}
	}
	sess, err := concurrency.NewSession(e.cli, concurrency.WithTTL(e.cfg.LeaseTTL), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	defer func() {
		// Revoke the lease (deleting the key if we held it) even when ctx
		// is already cancelled.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = e.cli.Revoke(rctx, sess.Lease())
		_ = sess.Close()
	}()
	resp, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", 0)).
		Then(clientv3.OpPut(e.key, e.cfg.Advertise, clientv3.WithLease(sess.Lease()))).
		Else(clientv3.OpGet(e.key)).
		Commit()
	if err != nil {
		return fmt.Errorf("txn: %w", err)
	}
	if !resp.Succeeded {
		current := ""
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			current = string(kvs[0].Value)
		}
		e.log.Info("HA: standing by", "leader", current, "key", e.key)
		return e.waitDeleted(ctx, resp.Header.Revision)
	}
	version := uint64(resp.Header.Revision)
	e.log.Info("HA: elected leader", "address", e.cfg.Advertise, "key", e.key, "view_version", version)
	if e.rep != nil {
		return e.leadReplicated(ctx, sess, resp.Header.Revision)
	}
	if e.cfg.Grace > 0 {
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
			return fmt.Errorf("lease lost during grace period")
		case <-time.After(e.cfg.Grace):
		}
	}
	// Before serving from an empty state, say so in etcd: a later leader
	// with the oplog must not take the log as the state any more
	// (lineage.go).
	if err := recordUnloggedLeadership(ctx, e.cli, e.cfg.ClusterID, e.key, resp.Header.Revision, e.cfg.Advertise); err != nil {
		return err
	}
	lost := make(chan error, 1)
	e.srv.SetFence(e.fence(resp.Header.Revision, lost))
	e.srv.SetLeader(true, version)
	e.log.Info("HA: serving as leader", "view_version", version)
	defer func() {
		e.srv.SetLeader(false, 0)
		e.srv.SetFence(nil)
		e.log.Warn("HA: no longer leader")
	}()
	return e.holdLeadership(ctx, sess, resp.Header.Revision, lost)
}

// fence is the leadership of the key created at rev, for GET /role
// (the master's role.go): when /role finds the key gone it delivers to
// lost, which holdLeadership reads.
func (e *elector) fence(rev int64, lost chan<- error) *Fence {
	return etcdFence(e.cli, e.key, rev, func() {
		select {
		case lost <- fmt.Errorf("%w (seen by GET /role)", errKeyTakenOver):
		default:
		}
	})
}

// errKeyTakenOver means the election key was deleted or changed hands.
var errKeyTakenOver = errors.New("master view key taken over")

// holdLeadership returns when leadership is lost: the lease dies, the
// key is changed or deleted after rev, or fenced delivers (the oplog
// writer failed, or GET /role found the key gone).
func (e *elector) holdLeadership(ctx context.Context, sess *concurrency.Session, rev int64, fenced <-chan error) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := e.cli.Watch(wctx, e.key, clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fenced:
			return err
		case <-sess.Done():
			return fmt.Errorf("master view lease expired")
		case wr, ok := <-wch:
			if !ok {
				return fmt.Errorf("watch closed")
			}
			if err := wr.Err(); err != nil {
				return fmt.Errorf("watch: %w", err)
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete || string(ev.Kv.Value) != e.cfg.Advertise {
					return errKeyTakenOver
				}
			}
		}
	}
}

// waitDeleted blocks until the key is deleted after rev, or ctx ends.
func (e *elector) waitDeleted(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range e.cli.Watch(wctx, e.key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	return ctx.Err()
}

// startTail has the standby apply the oplog in the background.
func (e *elector) startTail() {
	e.stopTail = e.rep.StartTail(e.cli, OplogPrefix(e.cfg.ClusterID), e.cfg.OplogPollInterval)
}

// leadReplicated is a won round with the oplog: stop tailing, apply the
// rest of the log, serve until leadership is lost, then stand by again
// with the state rebuilt from the log. No grace period: the writer's
// fencing keeps a deposed leader from answering.
func (e *elector) leadReplicated(ctx context.Context, sess *concurrency.Session, rev int64) error {
	rep := e.rep
	e.stopTail()
	defer e.startTail()
	fenced := make(chan error, 1)
	start := time.Now()
	e.srv.SetFence(e.fence(rev, fenced))
	defer e.srv.SetFence(nil)
	err := rep.promote(ctx, e.cli, e.cfg, e.key, rev, func(err error) {
		select {
		case fenced <- fmt.Errorf("oplog: %w", err):
		default:
		}
	})
	if err != nil {
		return fmt.Errorf("promotion: %w", err)
	}
	e.log.Info("HA: serving as leader with the replicated metadata", "view_version", rev,
		"batches_applied", rep.AppliedSeq(), "catch_up", time.Since(start))
	defer func() {
		rep.demote()
		e.log.Warn("HA: no longer leader; rebuilding the metadata from the oplog")
	}()
	return e.holdLeadership(ctx, sess, rev, fenced)
}
