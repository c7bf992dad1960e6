package replication

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/internal/redis"
)

// Timing of the Redis election (upstream's): standbys and clients poll
// the view every RedisPollInterval (Redis has no watch), and the leader
// renews its lease every third of the TTL but not more often than
// redisMinRenew.
const (
	RedisPollInterval = 200 * time.Millisecond
	redisMinRenew     = 200 * time.Millisecond
)

// redisElector runs the election on Redis for one master (redis_view.go
// has the keys and scripts). Redis has no lease a client keeps alive
// and no watch, so the leader renews the view's expiry itself and
// standbys poll it. The leader counts its lease from the moment it sent
// the last renewal that succeeded, so it gives up serving before Redis
// can expire the view, even when Redis stops answering.
type redisElector struct {
	cfg     HAConfig
	srv     Node
	log     *slog.Logger
	cli     *redis.Client
	key     string // the view hash
	counter string // its version counter
	ttl     time.Duration
}

// runRedisElection is RunElection on the Redis server of cfg.Redis.
func runRedisElection(ctx context.Context, cfg HAConfig, srv Node, log *slog.Logger) error {
	cli := redis.New(*cfg.Redis)
	defer cli.Close()
	key, counter := RedisMasterViewKeys(cfg.ClusterID)
	e := &redisElector{cfg: cfg, srv: srv, log: log, cli: cli, key: key, counter: counter,
		ttl: time.Duration(cfg.LeaseTTL) * time.Second}
	for ctx.Err() == nil {
		if err := e.round(ctx); err != nil && ctx.Err() == nil {
			log.Warn("HA election round failed; retrying", "err", err, "redis", cli.Addr())
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// round is one attempt: win and serve until leadership is lost, or lose
// and wait until the view is gone. A leader that stops deletes the view
// (if it still owns it), so a standby takes over at once.
func (e *redisElector) round(ctx context.Context) error {
	token, err := ownerToken()
	if err != nil {
		return err
	}
	sent := time.Now()
	version, err := evalInt(ctx, e.cli, redisAcquire, []string{e.key, e.counter},
		e.cfg.Advertise, strconv.FormatInt(e.ttl.Milliseconds(), 10), token)
	if err != nil {
		return fmt.Errorf("acquire %s: %w", e.key, err)
	}
	if version <= 0 {
		view, _, err := ReadRedisMasterView(ctx, e.cli, e.cfg.ClusterID)
		if err != nil {
			return err
		}
		e.log.Info("HA: standing by", "leader", view.Leader, "view_version", view.Version, "key", e.key)
		return e.waitVacant(ctx)
	}
	e.log.Info("HA: elected leader", "address", e.cfg.Advertise, "key", e.key, "view_version", version)

	lost := make(chan error, 1)
	kctx, stopKeep := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		e.keepLease(kctx, token, sent, lost)
	}()
	defer func() {
		stopKeep()
		<-kept
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := evalInt(rctx, e.cli, redisRelease, []string{e.key}, token); err != nil {
			e.log.Warn("HA: could not delete the master view; it expires with the lease", "err", err)
		}
	}()
	if e.cfg.Grace > 0 {
		select {
		case <-ctx.Done():
			return nil
		case err := <-lost:
			return fmt.Errorf("during the grace period: %w", err)
		case <-time.After(e.cfg.Grace):
		}
	}
	e.srv.SetFence(e.fence(token, lost))
	e.srv.SetLeader(true, uint64(version))
	e.log.Info("HA: serving as leader", "view_version", version)
	defer func() {
		e.srv.SetLeader(false, 0)
		e.srv.SetFence(nil)
		e.log.Warn("HA: no longer leader")
	}()
	select {
	case <-ctx.Done():
		return nil
	case err := <-lost:
		return err
	}
}

// keepLease renews the view every third of the TTL until ctx ends. It
// delivers to lost when the view has another owner or is gone, or when
// renewals have failed until the lease counted from the last good one
// ran out.
func (e *redisElector) keepLease(ctx context.Context, token string, sent time.Time, lost chan<- error) {
	interval := max(e.ttl/3, redisMinRenew)
	validUntil := sent.Add(e.ttl)
	ms := strconv.FormatInt(e.ttl.Milliseconds(), 10)
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(interval, time.Until(validUntil))):
		}
		if !time.Now().Before(validUntil) {
			if lastErr == nil {
				lastErr = errors.New("no renewal answered in time")
			}
			deliver(lost, fmt.Errorf("master view lease expired: renewals failed: %w", lastErr))
			return
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(ctx, validUntil)
		n, err := evalInt(rctx, e.cli, redisRenew, []string{e.key}, token, ms)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			lastErr = err
			e.log.Warn("HA: renewing the master view failed; retrying until the lease runs out", "err", err, "lease_left", time.Until(validUntil).Round(time.Millisecond))
		case n == 1:
			validUntil, lastErr = sent.Add(e.ttl), nil
		default:
			deliver(lost, errKeyTakenOver)
			return
		}
	}
}

// waitVacant polls until no leader holds the view, or ctx ends.
func (e *redisElector) waitVacant(ctx context.Context) error {
	for {
		r, err := e.cli.Do(ctx, "EXISTS", e.key)
		if err != nil {
			return fmt.Errorf("poll %s: %w", e.key, err)
		}
		if r.Kind == redis.Integer && r.Int == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(RedisPollInterval):
		}
	}
}

// fence is the leadership of token, for GET /role (the master's
// role.go): when /role finds the view gone or owned by another it
// delivers to lost.
func (e *redisElector) fence(token string, lost chan<- error) *Fence {
	return &Fence{
		held: func(ctx context.Context) (bool, error) { return redisOwns(ctx, e.cli, e.key, token) },
		lost: func() { deliver(lost, fmt.Errorf("%w (seen by GET /role)", errKeyTakenOver)) },
	}
}

// deliver sends err unless one is already waiting.
func deliver(ch chan<- error, err error) {
	select {
	case ch <- err:
	default:
	}
}

// ownerToken is a random token naming one leadership.
func ownerToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("owner token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// errOplogOnRedis refuses the oplog with the Redis backend.
var errOplogOnRedis = errors.New("--enable_oplog with --ha_backend_type=redis is not implemented: this master keeps its oplog in etcd only (upstream can keep it in Redis; use --ha_backend_type=etcd for the oplog)")
