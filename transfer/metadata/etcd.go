package metadata

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/transfer/errcode"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Timeouts of the etcd backend: dialing, and each call whose context has no
// deadline of its own.
const (
	etcdDialTimeout    = 5 * time.Second
	etcdDefaultTimeout = 5 * time.Second
)

// EtcdStore is a Store backed by etcd v3, the upstream default. Keys
// and values are stored as they are, so engines of either implementation
// sharing one etcd see each other's segments. It is safe for concurrent use.
type EtcdStore struct {
	client    *clientv3.Client
	endpoints []string
	timeout   time.Duration // bound on a call whose ctx has no deadline
	closeOnce sync.Once
	closeErr  error
}

// NewEtcdStore returns a store using the etcd cluster at endpoints
// ("host:port" or "http://host:port"). Like upstream it does not wait for
// the cluster: an unreachable one makes each call fail once its deadline
// passes. The client's own logging is silenced; failures are reported
// through the returned errors.
func NewEtcdStore(endpoints []string) (*EtcdStore, error) { return NewEtcdStoreTLS(endpoints, nil) }

// NewEtcdStoreTLS is NewEtcdStore whose client runs TLS with cfg (nil:
// TLS only for https:// endpoints, verified with the system's roots).
func NewEtcdStoreTLS(endpoints []string, cfg *tls.Config) (*EtcdStore, error) {
	eps := make([]string, 0, len(endpoints))
	for _, ep := range endpoints {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return nil, errcode.Errorf(errcode.InvalidArgument, nil, "etcd metadata store: no endpoints")
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		TLS:         cfg,
		DialTimeout: etcdDialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, errcode.Errorf(errcode.Metadata, err, "connect etcd %s", strings.Join(eps, ","))
	}
	return &EtcdStore{client: c, endpoints: eps, timeout: etcdDefaultTimeout}, nil
}

// Endpoints returns the etcd endpoints the store uses.
func (s *EtcdStore) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// bound adds the default deadline to a context that has none.
func (s *EtcdStore) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.timeout)
}

// Get returns the value stored under key, or an error wrapping
// ErrNotFound when there is none.
func (s *EtcdStore) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, errcode.Errorf(errcode.Metadata, err, "etcd get %q", key)
	}
	if len(resp.Kvs) == 0 {
		return nil, errcode.Errorf(errcode.Metadata, ErrNotFound, "etcd get %q", key)
	}
	return resp.Kvs[0].Value, nil
}

// Put stores value under key, replacing any previous value.
func (s *EtcdStore) Put(ctx context.Context, key string, value []byte) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.client.Put(ctx, key, string(value)); err != nil {
		return errcode.Errorf(errcode.Metadata, err, "etcd put %q", key)
	}
	return nil
}

// Delete removes key; a missing key is not an error.
func (s *EtcdStore) Delete(ctx context.Context, key string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.client.Delete(ctx, key); err != nil {
		return errcode.Errorf(errcode.Metadata, err, "etcd delete %q", key)
	}
	return nil
}

// Close closes the connection to etcd. Calling it again returns the first
// call's result.
func (s *EtcdStore) Close() error {
	s.closeOnce.Do(func() {
		if err := s.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			s.closeErr = errcode.Errorf(errcode.Metadata, err, "close etcd client")
		}
	})
	return s.closeErr
}
