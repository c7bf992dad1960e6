package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/internal/pollread"
	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// masterConn is the client's connection to the master. With an
// "etcd://..." address it reads the elected leader from
// mooncake-store/<cluster_id>/master_view and reconnects when it changes;
// with "redis://host:port" it reads it from upstream's master view hash
// on Redis (replication.ReadRedisMasterView), polled as upstream does.
//
// Calls go over the framed transport (internal/framedrpc), which the
// master serves on its RPC port beside gRPC; MC_STORE_MASTER_RPC=grpc, or
// a master that does not answer the framed hello, selects gRPC.
type masterConn struct {
	addr   string // as configured
	tenant string // sent with every RPC unless it is the default
	ns     string // the namespace (kvstore.Namespace.Encode), sent unless ""
	// secret is the client's secret, sent with every call: the master
	// binds it to the client id at registration (kvstore.ClientSecretMetadataKey).
	secret string
	trace  *tracer     // every call is a "master.<Method>" phase span
	tls    *tls.Config // MC_TLS_*: nil for plain TCP
	etcd   *clientv3.Client
	key    string
	redis  *redis.Client // with a redis:// address
	// stopWatch ends the watch (etcd) or the polling (Redis) of the
	// master view.
	stopWatch context.CancelFunc
	watchDone chan struct{}

	mu     sync.Mutex
	leader string
	conn   io.Closer // *framedrpc.Client or *grpc.ClientConn
	rpc    pb.MasterClient
	diskTM pb.DiskTierClient // the disk tier's service on the same connection

	// gen counts connections: it changes whenever the client dials a
	// master (a new leader, or the same address after a failure), so
	// that state tied to one master (reserved blocks) can tell.
	gen atomic.Uint64
	// noExistCodes is set once the master answered BatchExistCodes with
	// Unimplemented (an older master); cleared at every new connection.
	noExistCodes atomic.Bool
}

// clusterID is the HA cluster whose master view the client follows.
func clusterID() string {
	if id := envvars.StoreClusterID.Value(); id != "" {
		return id
	}
	return replication.DefaultClusterID
}

func dialMaster(addr, tenant, secret string, ns kvstore.Namespace, trace *tracer) (*masterConn, error) {
	cfg, err := tlsconf.FromEnv().Client()
	if err != nil {
		return nil, err
	}
	m := &masterConn{addr: addr, tenant: tenant, ns: ns.Encode(), secret: secret, trace: trace, tls: cfg}
	if rest, ok := strings.CutPrefix(addr, "etcd://"); ok {
		eps := strings.FieldsFunc(rest, func(r rune) bool { return r == ';' || r == ',' })
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tlsconf.ForEtcd(cfg, eps), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("etcd %v: %w", eps, err)
		}
		m.etcd, m.key = cli, replication.MasterViewKey(clusterID())
	} else if strings.HasPrefix(addr, "redis://") {
		opts, err := redis.OptionsFromEnv(addr)
		if err != nil {
			return nil, err
		}
		m.redis = redis.New(opts)
		m.key, _ = replication.RedisMasterViewKeys(clusterID())
	}
	if _, err := m.reconnect(); err != nil {
		m.close()
		return nil, err
	}
	if m.etcd != nil || m.redis != nil {
		ctx, cancel := context.WithCancel(context.Background())
		m.stopWatch, m.watchDone = cancel, make(chan struct{})
		if m.etcd != nil {
			go m.followLeader(ctx)
		} else {
			go m.pollLeader(ctx)
		}
	}
	return m, nil
}

// followLeader watches the master view key and reconnects as soon as a
// new leader publishes its address, instead of waiting for failed pings:
// calls then reach the new leader at once, and calls in flight on the old
// connection fail (RPC_FAIL) rather than wait for their timeout.
func (m *masterConn) followLeader(ctx context.Context) {
	defer close(m.watchDone)
	for ctx.Err() == nil {
		for wr := range m.etcd.Watch(ctx, m.key) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				m.mu.Lock()
				same := string(ev.Kv.Value) == m.leader
				m.mu.Unlock()
				if same {
					continue
				}
				if changed, err := m.reconnect(); err != nil {
					slog.Warn("store client: new master leader unreachable", "leader", string(ev.Kv.Value), "err", err)
				} else if changed {
					slog.Info("store client: following the new master leader", "master", string(ev.Kv.Value))
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// pollLeader reads the Redis master view every
// replication.RedisPollInterval, as standbys do, and
// reconnects as soon as it names another leader: Redis has no watch, so
// this is followLeader's counterpart.
func (m *masterConn) pollLeader(ctx context.Context) {
	defer close(m.watchDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(replication.RedisPollInterval):
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		view, ok, err := replication.ReadRedisMasterView(rctx, m.redis, clusterID())
		cancel()
		if err != nil || !ok {
			continue // no leader now, or Redis unreachable: calls fail and retry on their own
		}
		m.mu.Lock()
		same := view.Leader == m.leader
		m.mu.Unlock()
		if same {
			continue
		}
		if changed, err := m.reconnect(); err != nil {
			slog.Warn("store client: new master leader unreachable", "leader", view.Leader, "err", err)
		} else if changed {
			slog.Info("store client: following the new master leader", "master", view.Leader, "view_version", view.Version)
		}
	}
}

// resolve returns the master's address: fixed, or the current leader.
func (m *masterConn) resolve() (string, error) {
	if m.etcd == nil && m.redis == nil {
		return m.addr, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m.redis != nil {
		view, ok, err := replication.ReadRedisMasterView(ctx, m.redis, clusterID())
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("no master elected (%s is empty)", m.key)
		}
		return view.Leader, nil
	}
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
	conn, cc, err := m.dial(addr)
	if err != nil {
		return false, err
	}
	if m.conn != nil {
		m.conn.Close()
	}
	changed = m.leader != ""
	m.noExistCodes.Store(false)
	m.gen.Add(1)
	m.conn, m.rpc, m.diskTM, m.leader = conn, pb.NewMasterClient(tracedConn{cc, m.trace}), pb.NewDiskTierClient(tracedConn{cc, m.trace}), addr
	return changed, nil
}

// masterBusy is how a framed call waits for the master's reply before it
// sleeps in poll(2) (MC_STORE_MASTER_SPIN_US, MC_STORE_MASTER_YIELD_US):
// by default it yield-polls for 200 µs, which keeps its CPU from going
// idle (waking it would cost tens of µs on a VM) while handing it to the
// master or another client that shares it. A pure spin kept those off the
// CPU: it doubled one client's calls/s but cut four clients' by a fifth.
// See docs/design/master-transport.md, "Client transport".
func masterBusy() pollread.Busy {
	return pollread.Busy{
		Spin:  time.Duration(envvars.StoreMasterSpinUs.Int(0)) * time.Microsecond,
		Yield: time.Duration(envvars.StoreMasterYieldUs.Int(200)) * time.Microsecond,
	}
}

// metadata is what every call carries: the tenant id unless it is the
// default, the tenant token of MC_TENANT_TOKEN when set, the namespace
// unless it is empty, the client secret (read by the master as
// kvstore.TenantMetadataKey, kvstore.TenantTokenMetadataKey,
// kvstore.NamespaceMetadataKey and kvstore.ClientSecretMetadataKey).
func (m *masterConn) metadata() map[string]string {
	md := map[string]string{}
	if m.tenant != "" && m.tenant != kvstore.DefaultTenant {
		md[kvstore.TenantMetadataKey] = m.tenant
	}
	if tok := envvars.StoreTenantToken.Value(); tok != "" {
		md[kvstore.TenantTokenMetadataKey] = tok
	}
	if m.ns != "" {
		md[kvstore.NamespaceMetadataKey] = m.ns
	}
	if m.secret != "" {
		md[kvstore.ClientSecretMetadataKey] = m.secret
	}
	return md
}

// dial connects to the master at addr with the configured transport.
func (m *masterConn) dial(addr string) (io.Closer, grpc.ClientConnInterface, error) {
	md := m.metadata()
	if envvars.StoreMasterRPC.Value() != "grpc" {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout())
		defer cancel()
		fc, err := framedrpc.Dial(ctx, addr, framedrpc.Options{Metadata: md, Busy: masterBusy(), TLS: m.tls})
		if err == nil {
			return fc, fc, nil
		}
		if !errors.Is(err, framedrpc.ErrNotFramed) {
			return nil, nil, fmt.Errorf("master %s: %w", addr, err)
		}
		if m.tls == nil {
			slog.Warn("the master does not serve framed RPC, or serves TLS (then set MC_TLS_*); using gRPC", "master", addr)
		} else {
			slog.Warn("the master does not serve framed RPC; using gRPC", "master", addr)
		}
	}
	opts := []grpc.DialOption{tlsconf.DialOption(m.tls)}
	if len(md) > 0 {
		opts = append(opts, grpc.WithUnaryInterceptor(withMetadata(md)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("master %s: %w", addr, err)
	}
	return conn, conn, nil
}

func (m *masterConn) client() pb.MasterClient {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rpc
}

func (m *masterConn) close() {
	if m.stopWatch != nil {
		m.stopWatch()
		<-m.watchDone
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		m.conn.Close()
		m.conn = nil
	}
	if m.etcd != nil {
		m.etcd.Close()
	}
	if m.redis != nil {
		m.redis.Close()
	}
}

// withMetadata adds md to the metadata of every gRPC call.
func withMetadata(md map[string]string) grpc.UnaryClientInterceptor {
	kv := make([]string, 0, 2*len(md))
	for k, v := range md {
		kv = append(kv, k, v)
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
