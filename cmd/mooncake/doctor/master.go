package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/kvstore/master"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// masterFacts is what the master checks learned, for the checks after
// them: the address that answered and its admin endpoint.
type masterFacts struct {
	results []Result
	// addr is the master's RPC address once it answered, else "".
	addr string
	// admin is "host:port" of its admin endpoint once /status answered.
	admin string
	// status is /status's answer when admin is set.
	status master.Status
}

// probeKey is the key the reachability check asks the master about.
const probeKey = "mooncake-doctor-probe"

// checkMaster finds the master (through etcd for "etcd://...", Redis for
// "redis://..."), checks it
// answers RPCs, reads its version and role from the admin endpoint and
// estimates the clock offset.
func checkMaster(ctx context.Context, cfg Config, env environ) masterFacts {
	var f masterFacts
	if cfg.Master == "" {
		f.results = append(f.results, skipped("master", "no master given (--master)"))
		return f
	}
	addr := cfg.Master
	clusterID := env.value(envvars.StoreClusterID, replication.DefaultClusterID)
	if rest, isEtcd := strings.CutPrefix(addr, "etcd://"); isEtcd {
		leader, r := resolveLeader(ctx, cfg, replication.ParseEndpoints(rest), clusterID)
		f.results = append(f.results, r)
		if leader == "" {
			return f
		}
		addr = leader
	} else if strings.HasPrefix(addr, "redis://") {
		leader, r := resolveRedisLeader(ctx, cfg, addr, clusterID)
		f.results = append(f.results, r)
		if leader == "" {
			return f
		}
		addr = leader
	}
	if err := pingMaster(ctx, cfg, addr); err != nil {
		if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "not the leader") {
			f.results = append(f.results, problem("master", Warning, troubleshoot.MasterStandby,
				fmt.Sprintf("master %s answers but is a standby: %v", addr, err)))
		} else {
			f.results = append(f.results, problem("master", Failure, troubleshoot.MasterUnreachable,
				fmt.Sprintf("master %s does not answer RPCs: %v", addr, err)))
			return f
		}
	} else {
		f.results = append(f.results, ok("master", fmt.Sprintf("master %s answers RPCs", addr)))
	}
	f.addr = addr
	host, _, _ := net.SplitHostPort(addr)
	admin := net.JoinHostPort(host, strconv.Itoa(cfg.MetricsPort))
	st, offset, rtt, err := fetchStatus(ctx, cfg, admin)
	if err != nil {
		f.results = append(f.results, finding("master.status", Warning,
			fmt.Sprintf("admin endpoint http://%s/status does not answer (%v): version, role and clock not checked", admin, err),
			"pass the master's --metrics_port as --metrics_port, or let the doctor reach that port"))
		return f
	}
	f.admin, f.status = admin, st
	f.results = append(f.results, roleResult(st, clusterID), clockResult(st, offset, rtt))
	return f
}

// resolveLeader reads the elected leader from the master view key.
func resolveLeader(ctx context.Context, cfg Config, endpoints []string, clusterID string) (string, Result) {
	key := replication.MasterViewKey(clusterID)
	cli, err := newEtcdClient(endpoints, cfg.Timeout)
	if err != nil {
		return "", problem("master.leader", Failure, troubleshoot.MetadataUnreachable, fmt.Sprintf("etcd %v: %v", endpoints, err))
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	resp, err := cli.Get(cctx, key)
	if err != nil {
		return "", problem("master.leader", Failure, troubleshoot.MetadataUnreachable,
			fmt.Sprintf("read master view %s from etcd %v: %v", key, endpoints, err))
	}
	if len(resp.Kvs) == 0 {
		msg := fmt.Sprintf("no master elected: %s is absent", key)
		if others := otherClusters(ctx, cli, cfg.Timeout); len(others) > 0 {
			msg += fmt.Sprintf("; etcd holds master views of cluster ids %s, so MC_STORE_CLUSTER_ID=%q likely differs from the masters' --cluster_id",
				strings.Join(others, ", "), clusterID)
		}
		return "", problem("master.leader", Failure, troubleshoot.NoMasterElected, msg)
	}
	leader := string(resp.Kvs[0].Value)
	return leader, ok("master.leader", fmt.Sprintf("elected leader of cluster %q is %s (view version %d)", clusterID, leader, resp.Kvs[0].CreateRevision))
}

// resolveRedisLeader reads the elected leader from the Redis master view
// (credentials from this process's MC_REDIS_*).
func resolveRedisLeader(ctx context.Context, cfg Config, conn, clusterID string) (string, Result) {
	opts, err := redis.OptionsFromEnv(conn)
	if err != nil {
		return "", finding("master.leader", Failure, fmt.Sprintf("master %q: %v", conn, err), `write it as "redis://host:6379"`)
	}
	cli := redis.New(opts)
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	view, found, err := replication.ReadRedisMasterView(cctx, cli, clusterID)
	if err != nil {
		return "", problem("master.leader", Failure, troubleshoot.MetadataUnreachable, fmt.Sprintf("redis %s: %v", opts.Addr, err))
	}
	if !found {
		key, _ := replication.RedisMasterViewKeys(clusterID)
		return "", problem("master.leader", Failure, troubleshoot.NoMasterElected,
			fmt.Sprintf("no master elected: %s is absent in redis %s (or MC_STORE_CLUSTER_ID=%q differs from the masters' --cluster_id)", key, opts.Addr, clusterID))
	}
	return view.Leader, ok("master.leader", fmt.Sprintf("elected leader of cluster %q is %s (view version %d)", clusterID, view.Leader, view.Version))
}

// pingMaster asks the master whether probeKey exists: any answer but a
// transport failure means it serves.
func pingMaster(ctx context.Context, cfg Config, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	_, err = masterpb.NewMasterClient(conn).ExistKey(cctx, &masterpb.KeyRequest{Key: probeKey})
	if err != nil {
		return fmt.Errorf("ExistKey: %w", err)
	}
	return nil
}

// fetchStatus reads GET /status and estimates the master's clock offset
// from this host's: the master's time minus the midpoint of the request.
func fetchStatus(ctx context.Context, cfg Config, admin string) (st master.Status, offset, rtt time.Duration, err error) {
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+admin+"/status", nil)
	if err != nil {
		return st, 0, 0, err
	}
	t0 := time.Now()
	resp, err := directHTTP.Do(req)
	t1 := time.Now()
	if err != nil {
		return st, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, 0, 0, fmt.Errorf("http %d (a master older than this doctor has no /status)", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, 0, 0, fmt.Errorf("decode /status: %w", err)
	}
	rtt = t1.Sub(t0)
	mid := t0.Add(rtt / 2)
	return st, time.Unix(0, st.TimeUnixNano).Sub(mid), rtt, nil
}

// directHTTP talks to the master's admin endpoint without proxies (the
// proxy check reports proxies separately).
var directHTTP = &http.Client{Transport: &http.Transport{Proxy: nil}}

func roleResult(st master.Status, clusterID string) Result {
	desc := fmt.Sprintf("master version %s, role %s", st.Version, st.Role)
	if st.HA {
		desc += fmt.Sprintf(", HA cluster %q, view version %d", st.ClusterID, st.ViewVersion)
	}
	switch {
	case st.HA && st.ClusterID != clusterID:
		return problem("master.role", Failure, troubleshoot.NoMasterElected,
			fmt.Sprintf("%s; this host's MC_STORE_CLUSTER_ID is %q, so clients here look for another cluster's leader", desc, clusterID))
	case st.Role != "leader":
		return problem("master.role", Warning, troubleshoot.MasterStandby, desc+"; a standby refuses requests until elected")
	}
	return ok("master.role", desc)
}

// Clock offsets the doctor tolerates: leases and client liveness are timed
// by the master, and logs are compared across hosts.
const (
	clockWarn = 100 * time.Millisecond
	clockFail = time.Second
)

func clockResult(st master.Status, offset, rtt time.Duration) Result {
	abs := offset.Abs()
	msg := fmt.Sprintf("clock offset from the master %v (± %v, half the round trip)", offset.Round(time.Microsecond), (rtt / 2).Round(time.Microsecond))
	fix := "synchronise the clocks (chrony or ntpd on every host); leases (" +
		(time.Duration(st.LeaseTTLMs) * time.Millisecond).String() + ") and the client TTL are timed by the master"
	switch {
	case abs >= clockFail:
		return finding("master.clock", Failure, msg, fix)
	case abs >= clockWarn:
		return finding("master.clock", Warning, msg, fix)
	}
	return ok("master.clock", msg)
}
