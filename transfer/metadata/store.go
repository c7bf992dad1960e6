package metadata

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/transfer/errcode"
)

// ErrNotFound is returned by a Store for a missing key.
var ErrNotFound = errors.New("metadata key not found")

// Store is a key-value store that segments publish their descriptors in.
// Implementations: EtcdStore, HTTPStore and RedisStore.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	Close() error
}

// Open connects the store of a non-P2P connection. TLS settings come from
// MC_TLS_CERT_FILE, MC_TLS_KEY_FILE and MC_TLS_CA_FILE: an https:// server
// is verified with the CA (else the system's roots) and shown the
// certificate; etcd gets them when its endpoints are https:// URLs
// ("etcd://https://host:2379").
func Open(c Conn) (Store, error) {
	cfg, err := tlsconf.FromEnv().Client()
	if err != nil {
		return nil, errcode.Errorf(errcode.InvalidArgument, err, "metadata store TLS settings")
	}
	switch c.Kind {
	case "etcd":
		eps := strings.Split(c.Target, ",")
		return NewEtcdStoreTLS(eps, tlsconf.ForEtcd(cfg, eps))
	case "http":
		return NewHTTPStoreTLS(c.Target, cfg), nil
	case "redis":
		return NewRedisStore(c.Target)
	default:
		return nil, fmt.Errorf("no metadata store for %q", c.Kind)
	}
}
