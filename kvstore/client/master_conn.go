package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// masterConn is the client's connection to the master. With an
// "etcd://..." address it reads the elected leader from
// mooncake-store/<cluster_id>/master_view and reconnects when it changes.
type masterConn struct {
	addr   string  // as configured
	tenant string  // sent with every RPC unless it is the default
	ns     string  // the namespace (kvstore.Namespace.Encode), sent unless ""
	trace  *tracer // every RPC is a "master.<Method>" phase span
	etcd   *clientv3.Client
	key    string

	mu     sync.Mutex
	leader string
	conn   *grpc.ClientConn
	rpc    pb.MasterClient
}

// masterViewKey is where HA masters publish the leader's address.
func masterViewKey() string {
	id := envvars.StoreClusterID.Value()
	if id == "" {
		id = "mooncake_cluster"
	}
	return "mooncake-store/" + id + "/master_view"
}

func dialMaster(addr, tenant string, ns kvstore.Namespace, trace *tracer) (*masterConn, error) {
	m := &masterConn{addr: addr, tenant: tenant, ns: ns.Encode(), trace: trace}
	if rest, ok := strings.CutPrefix(addr, "etcd://"); ok {
		eps := strings.FieldsFunc(rest, func(r rune) bool { return r == ';' || r == ',' })
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("etcd %v: %w", eps, err)
		}
		m.etcd, m.key = cli, masterViewKey()
	}
	if _, err := m.reconnect(); err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

// resolve returns the master's address: fixed, or the current leader.
func (m *masterConn) resolve() (string, error) {
	if m.etcd == nil {
		return m.addr, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := m.etcd.Get(ctx, m.key)
	if err != nil {
		return "", fmt.Errorf("read master view %s: %w", m.key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("no master elected (%s is empty)", m.key)
	}
	return string(resp.Kvs[0].Value), nil
}

// reconnect (re)dials the master, following a new leader, and reports
// whether it now talks to a different master than before.
func (m *masterConn) reconnect() (changed bool, err error) {
	addr, err := m.resolve()
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil && addr == m.leader {
		return false, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(m.trace.rpcSpans)}
	var md []string
	if m.tenant != "" && m.tenant != kvstore.DefaultTenant {
		md = append(md, kvstore.TenantMetadataKey, m.tenant)
	}
	if m.ns != "" {
		md = append(md, kvstore.NamespaceMetadataKey, m.ns)
	}
	if len(md) > 0 {
		opts = append(opts, grpc.WithChainUnaryInterceptor(withMetadata(md)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return false, fmt.Errorf("master %s: %w", addr, err)
	}
	if m.conn != nil {
		m.conn.Close()
	}
	changed = m.leader != ""
	m.conn, m.rpc, m.leader = conn, pb.NewMasterClient(conn), addr
	return changed, nil
}

func (m *masterConn) client() pb.MasterClient {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rpc
}

func (m *masterConn) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		m.conn.Close()
		m.conn = nil
	}
	if m.etcd != nil {
		m.etcd.Close()
	}
}

// withMetadata adds key/value pairs kv to the metadata of every call: the
// tenant id and the namespace, where the master reads them
// (kvstore.TenantMetadataKey, kvstore.NamespaceMetadataKey).
func withMetadata(kv []string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
