package metadata

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrNotFound is returned by a Store for a missing key.
var ErrNotFound = errors.New("metadata key not found")

// Store is a key-value store that segments publish their descriptors in.
// Implementations: EtcdStore and HTTPStore.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	Close() error
}

// Open connects the store of a non-P2P connection.
func Open(c Conn) (Store, error) {
	switch c.Kind {
	case "etcd":
		return NewEtcdStore(strings.Split(c.Target, ","))
	case "http":
		return NewHTTPStore(c.Target), nil
	default:
		return nil, fmt.Errorf("no metadata store for %q", c.Kind)
	}
}
