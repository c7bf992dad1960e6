package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/transfer/metadata"
)

func newEtcdClient(endpoints []string, timeout time.Duration) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: timeout, Logger: zap.NewNop()})
}

// etcdEndpoints are the etcd endpoints the deployment uses: the metadata
// server's when it is etcd, and the HA masters'.
func etcdEndpoints(cfg Config) []string {
	var eps []string
	if c, err := metadata.ParseConn(cfg.Metadata); err == nil && c.Kind == "etcd" {
		eps = append(eps, strings.Split(c.Target, ",")...)
	}
	if rest, ok := strings.CutPrefix(cfg.Master, "etcd://"); ok {
		eps = append(eps, replication.ParseEndpoints(rest)...)
	}
	var out []string
	for _, ep := range eps {
		if ep = strings.TrimSpace(ep); ep != "" && !slices.Contains(out, ep) {
			out = append(out, ep)
		}
	}
	return out
}

// checkEtcd asks every etcd endpoint in use for its status: reachable,
// its version, and whether the cluster has a leader.
func checkEtcd(ctx context.Context, cfg Config) []Result {
	eps := etcdEndpoints(cfg)
	if len(eps) == 0 {
		return []Result{skipped("etcd", "etcd is not used (neither --metadata nor --master names it)")}
	}
	cli, err := newEtcdClient(eps, cfg.Timeout)
	if err != nil {
		return []Result{problem("etcd", Failure, troubleshoot.MetadataUnreachable, fmt.Sprintf("etcd %v: %v", eps, err))}
	}
	defer cli.Close()
	var out []Result
	for _, ep := range eps {
		cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		st, err := cli.Status(cctx, ep)
		cancel()
		switch {
		case err != nil:
			out = append(out, problem("etcd", Failure, troubleshoot.MetadataUnreachable, fmt.Sprintf("etcd %s does not answer: %v", ep, err)))
		case st.Leader == 0:
			out = append(out, finding("etcd", Failure, fmt.Sprintf("etcd %s (version %s) has no leader", ep, st.Version),
				"bring a majority of the etcd members up (etcdctl endpoint status --cluster)"))
		default:
			role := "follower"
			if st.Leader == st.Header.MemberId {
				role = "leader"
			}
			out = append(out, ok("etcd", fmt.Sprintf("etcd %s healthy: version %s, %s, leader %x, raft term %d", ep, st.Version, role, st.Leader, st.RaftTerm)))
		}
	}
	return out
}

// otherClusters lists the cluster ids that have a master view in etcd.
func otherClusters(ctx context.Context, cli *clientv3.Client, timeout time.Duration) []string {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := cli.Get(cctx, "mooncake-store/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil
	}
	var ids []string
	for _, kv := range resp.Kvs {
		if id, ok := strings.CutSuffix(strings.TrimPrefix(string(kv.Key), "mooncake-store/"), "/master_view"); ok {
			ids = append(ids, fmt.Sprintf("%q", id))
		}
	}
	return ids
}
