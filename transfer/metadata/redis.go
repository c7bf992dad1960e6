package metadata

import (
	"context"
	"errors"

	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/transfer/errcode"
)

// RedisStore is a Store on one Redis server (metadata "redis://host:port"),
// as upstream's Redis plugin keeps it: each key (keys.go's layout, the
// same as etcd's and HTTP's) is a Redis string holding the value as it
// is. Credentials and the database come from MC_REDIS_USERNAME,
// MC_REDIS_PASSWORD and MC_REDIS_DB_INDEX. A call whose context has no
// deadline is bounded by the client's command timeout (3 s). It is safe
// for concurrent use.
type RedisStore struct {
	cli *redis.Client
}

// NewRedisStore returns a store on the Redis server that conn names
// ("redis://host:port" or "host:port"). Like the etcd store it does not
// connect until the first call.
func NewRedisStore(conn string) (*RedisStore, error) {
	opts, err := redis.OptionsFromEnv(conn)
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, err, "redis metadata store")
	}
	return &RedisStore{cli: redis.New(opts)}, nil
}

// Get returns the value stored under key, or an error wrapping
// ErrNotFound when there is none.
func (s *RedisStore) Get(ctx context.Context, key string) ([]byte, error) {
	v, ok, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, errcode.Errorf(errcode.Metadata, err, "redis get %q", key)
	}
	if !ok {
		return nil, errcode.Errorf(errcode.Metadata, ErrNotFound, "redis get %q", key)
	}
	return v, nil
}

// Put stores value under key, replacing any previous value.
func (s *RedisStore) Put(ctx context.Context, key string, value []byte) error {
	if err := s.cli.Set(ctx, key, value); err != nil {
		return errcode.Errorf(errcode.Metadata, err, "redis set %q", key)
	}
	return nil
}

// Delete removes key; a missing key is not an error.
func (s *RedisStore) Delete(ctx context.Context, key string) error {
	if _, err := s.cli.Del(ctx, key); err != nil {
		return errcode.Errorf(errcode.Metadata, err, "redis del %q", key)
	}
	return nil
}

// Close closes the connection. Calling it again is harmless.
func (s *RedisStore) Close() error {
	if err := s.cli.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return errcode.Errorf(errcode.Metadata, err, "close redis client")
	}
	return nil
}
