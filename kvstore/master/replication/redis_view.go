package replication

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/internal/redis"
)

// The master view on Redis, in upstream's layout: a hash
//
//	mooncake-store/{<cluster_id>}/master_view
//	  leader_address  the leader's rpc_address:rpc_port
//	  view_version    the leadership's number, from INCR of the counter below
//	  owner_token     a random token only the leader knows
//
// that expires one lease TTL after the leader's last renewal, and the
// counter mooncake-store/{<cluster_id>}/master_view_version. The braces
// are a Redis Cluster hash tag: both keys live in one slot, so one script
// may touch both.
const (
	redisFieldLeader  = "leader_address"
	redisFieldVersion = "view_version"
	redisFieldOwner   = "owner_token"
)

// RedisMasterViewKeys returns the master view hash and its version
// counter for a cluster id (DefaultClusterID when empty). '{' and '}' in
// the id become '_' and one trailing '/' is dropped, as upstream does, so
// the id is one hash tag.
func RedisMasterViewKeys(clusterID string) (view, version string) {
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	tag := strings.NewReplacer("{", "_", "}", "_").Replace(strings.TrimSuffix(clusterID, "/"))
	prefix := "mooncake-store/{" + tag + "}/"
	return prefix + "master_view", prefix + "master_view_version"
}

// MasterView is the leader a master view names.
type MasterView struct {
	// Leader is the address clients dial.
	Leader string
	// Version numbers the leadership; every election raises it.
	Version uint64
}

// ReadRedisMasterView reads the current view; ok is false when no leader
// holds one. A view with some fields and not others is an error.
func ReadRedisMasterView(ctx context.Context, cli *redis.Client, clusterID string) (v MasterView, ok bool, err error) {
	key, _ := RedisMasterViewKeys(clusterID)
	r, err := cli.Do(ctx, "HMGET", key, redisFieldLeader, redisFieldVersion, redisFieldOwner)
	if err != nil {
		return MasterView{}, false, fmt.Errorf("read master view %s: %w", key, err)
	}
	if r.Kind != redis.Array || len(r.Elems) != 3 {
		return MasterView{}, false, fmt.Errorf("read master view %s: %w: HMGET answered %s", key, redis.ErrProtocol, r.Kind)
	}
	nils := 0
	for _, e := range r.Elems {
		if e.Kind == redis.Nil {
			nils++
		}
	}
	switch nils {
	case 3:
		return MasterView{}, false, nil
	case 0:
	default:
		return MasterView{}, false, fmt.Errorf("master view %s is partly written (%d of its 3 fields missing)", key, nils)
	}
	version, err := strconv.ParseUint(string(r.Elems[1].Str), 10, 64)
	if err != nil || len(r.Elems[0].Str) == 0 || len(r.Elems[2].Str) == 0 {
		return MasterView{}, false, fmt.Errorf("master view %s: bad fields (leader %q, version %q)", key, r.Elems[0].Str, r.Elems[1].Str)
	}
	return MasterView{Leader: string(r.Elems[0].Str), Version: version}, true, nil
}

// The scripts of the Redis election. Each runs atomically on the server.
const (
	// redisAcquire creates the view if no leader holds it: KEYS view,
	// counter; ARGV address, lease ms, owner token. It returns the new
	// view version, or 0 when the view is held.
	redisAcquire = `
if redis.call('EXISTS', KEYS[1]) ~= 0 then
  return 0
end
local version = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'leader_address', ARGV[1], 'view_version', version, 'owner_token', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return version`

	// redisRenew extends the lease if the caller still owns the view:
	// KEYS view; ARGV owner token, lease ms. 1 renewed, 0 not the owner.
	redisRenew = `
if redis.call('HGET', KEYS[1], 'owner_token') == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`

	// redisRelease deletes the view if the caller owns it: KEYS view;
	// ARGV owner token. 1 deleted, 0 not the owner.
	redisRelease = `
if redis.call('HGET', KEYS[1], 'owner_token') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`
)

// redisOwns reports whether the view is still held by token.
func redisOwns(ctx context.Context, cli *redis.Client, key, token string) (bool, error) {
	r, err := cli.Do(ctx, "HGET", key, redisFieldOwner)
	if err != nil {
		return false, err
	}
	return r.Kind == redis.Bulk && string(r.Str) == token, nil
}

// evalInt runs a script whose reply is an integer.
func evalInt(ctx context.Context, cli *redis.Client, script string, keys []string, args ...string) (int64, error) {
	r, err := cli.Eval(ctx, script, keys, args...)
	if err != nil {
		return 0, err
	}
	if r.Kind != redis.Integer {
		return 0, fmt.Errorf("%w: script answered %s, want an integer", redis.ErrProtocol, r.Kind)
	}
	return r.Int, nil
}
