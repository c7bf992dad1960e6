// Command mooncake_master runs the Mooncake KV store's metadata service:
// the gRPC master (kvstore/master) on --rpc_port, its admin/metrics HTTP
// endpoint on --metrics_port, and optionally the Transfer Engine HTTP
// metadata store (--enable_http_metadata_server) and leader election on
// etcd or Redis (--enable_ha, --ha_backend_type). Flags keep upstream's
// names and defaults.
//
// Usage:
//
//	mooncake_master [--rpc_port 50051] [--enable_http_metadata_server=true] ...
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/logging"
	"github.com/mooncake-go/mooncake/internal/redis"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/kvstore/master"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/transfer/metaserver"
)

func main() {
	logging.Setup()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	err := run(os.Args[1:], os.Stderr, stop)
	os.Exit(cli.Report(os.Stderr, "mooncake_master", err, troubleshoot.HintFor))
}

// options are the parsed flags.
type options struct {
	tls                         tlsconf.Files
	tenantTokensFile            string
	adminAllowRemote            bool
	requireClientSecret         bool
	rpcPort, port               int
	rpcAddress                  string
	metricsPort                 int
	metricsHost                 string
	enableMetricReporting       bool
	cfg                         master.Config
	enableHTTPMetadata          bool
	httpMetadataPort            int
	httpMetadataHost            string
	httpMetadataMaxKeys         int
	httpMetadataMaxBytes        int64
	cleanupOnTimeout            bool
	enableHA                    bool
	haBackendType               string
	haConnString, etcdEndpoints string
	haRedis                     *redis.Options // --ha_backend_type=redis
	clusterID                   string
	enableOplog                 bool
	oplogPollMs, oplogBatchMax  int
	oplogPipelineDepth, haLease int
	oplogRetrySec               int
	snapshot                    snapshotOptions
	snapshotConfig              *replication.SnapshotConfig
	memoryAllocator, allocStrat string
	rpcThreads, maxThreads      int
	rpcConnTimeout              int
	rpcNoDelay                  bool
	minLogLevel, verbosity      int
	logToStderr                 bool
	glogLevel                   *slog.Level // set when --minloglevel or -v is given
	kvEvents                    kvEventsFlags
	unsupported                 unsupportedFlags
	dynRepl                     dynReplFlags
	tenantPolicy                tenantPolicyFlags
	tenantPolicyFile            string
}

// newFlagSet declares every flag into o.
func newFlagSet(o *options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("mooncake_master", flag.ContinueOnError)
	fs.SetOutput(out)
	o.cfg = master.DefaultConfig()
	o.rpcPort, o.port, o.metricsPort, o.httpMetadataPort = 50051, 50051, 9003, 8080
	fs.Var(port{&o.rpcPort}, "rpc_port", "gRPC port of the master service")
	fs.Var(port{&o.port}, "port", "deprecated alias of --rpc_port, used when --rpc_port is not given")
	fs.StringVar(&o.rpcAddress, "rpc_address", "0.0.0.0", "address to bind the RPC service; in HA mode also the address advertised to clients")
	fs.StringVar(&o.rpcAddress, "rpc_interface", "0.0.0.0", "alias of --rpc_address")
	fs.Var(port{&o.metricsPort}, "metrics_port", "port of the admin HTTP endpoint (/metrics, /health, ...)")
	fs.StringVar(&o.metricsHost, "metrics_host", "0.0.0.0", "address to bind the admin HTTP endpoint")
	fs.BoolVar(&o.enableMetricReporting, "enable_metric_reporting", true, "log a metrics summary periodically")
	fs.Var(msDuration{&o.cfg.DefaultLeaseTTL}, "default_kv_lease_ttl", "read lease granted by Get/Exist, in ms or as a duration (\"500\", \"10s\", \"1m\")")
	fs.Var(msDuration{&o.cfg.DefaultSoftPinTTL}, "default_kv_soft_pin_ttl", "soft pin TTL when a put enables soft pin without one, ms")
	fs.Var(msDuration{&o.cfg.MaxSoftPinTTL}, "max_kv_soft_pin_ttl", "largest soft pin TTL a put may ask for, ms")
	fs.BoolVar(&o.cfg.AllowEvictSoftPinned, "allow_evict_soft_pinned_objects", true, "let eviction take soft-pinned objects when needed")
	fs.Var(ratio{&o.cfg.EvictionRatio}, "eviction_ratio", "fraction of objects one eviction run aims to free, in [0,1]")
	fs.Var(ratio{&o.cfg.EvictionHighWatermarkRatio}, "eviction_high_watermark_ratio", "used/capacity ratio that triggers eviction, in [0,1]")
	fs.Var(secDuration{&o.cfg.ClientTTL}, "client_ttl", "seconds a client may stay silent before it is suspect: its segments take no new replicas, keeping theirs")
	fs.Var(secDuration{&o.cfg.ClientDeadTTL}, "client_dead_ttl", "seconds a client may stay silent before it is forgotten: its segments unmounted, their replicas dropped (below client_ttl: as client_ttl)")
	fs.Var(secDuration{&o.cfg.PutStartDiscardTimeout}, "put_start_discard_timeout_sec", "seconds after which a pending put may be preempted")
	fs.Var(secDuration{&o.cfg.PutStartReleaseTimeout}, "put_start_release_timeout_sec", "seconds a preempted put's buffers stay quarantined")
	fs.BoolVar(&o.enableHTTPMetadata, "enable_http_metadata_server", false, "also serve the Transfer Engine HTTP metadata store (/metadata)")
	fs.Var(port{&o.httpMetadataPort}, "http_metadata_server_port", "port of the embedded HTTP metadata store")
	fs.StringVar(&o.httpMetadataHost, "http_metadata_server_host", "0.0.0.0", "address to bind the embedded HTTP metadata store")
	fs.IntVar(&o.httpMetadataMaxKeys, "http_metadata_server_max_keys", metaserver.DefaultMaxKeys, "keys the embedded HTTP metadata store holds at most; a PUT of a new key beyond is answered 507 (0: no limit)")
	fs.Int64Var(&o.httpMetadataMaxBytes, "http_metadata_server_max_bytes", metaserver.DefaultMaxBytes, "bytes of keys and values the embedded HTTP metadata store holds at most; a PUT that would grow it beyond is answered 507 (0: no limit)")
	fs.BoolVar(&o.cleanupOnTimeout, "enable_metadata_cleanup_on_timeout", false, "delete an expired client's mooncake/ram and mooncake/rpc_meta keys from the embedded metadata store")
	fs.BoolVar(&o.enableHA, "enable_ha", false, "elect a leader through etcd or Redis; standbys refuse RPCs until elected")
	fs.StringVar(&o.haBackendType, "ha_backend_type", "etcd", "HA backend: etcd or redis (k8s is refused at startup)")
	fs.StringVar(&o.haConnString, "ha_backend_connstring", "", "etcd endpoints for HA, separated by ';' or ','; with redis one redis://host:port")
	fs.StringVar(&o.etcdEndpoints, "etcd_endpoints", "", "legacy form of --ha_backend_connstring")
	clusterDefault := replication.DefaultClusterID
	if v := envvars.StoreClusterID.Value(); v != "" {
		clusterDefault = v
	}
	fs.StringVar(&o.clusterID, "cluster_id", clusterDefault, "cluster id: HA key mooncake-store/<cluster_id>/master_view (env MC_STORE_CLUSTER_ID)")
	fs.BoolVar(&o.enableOplog, "enable_oplog", false, "with --enable_ha on etcd: replicate the metadata through an operation log in etcd; standbys apply it and a promoted one serves the same objects")
	fs.IntVar(&o.oplogPollMs, "oplog_poll_interval_ms", int(replication.DefaultOplogPollInterval/time.Millisecond), "how often a standby re-reads the oplog besides watching it, ms")
	fs.IntVar(&o.oplogBatchMax, "oplog_batch_max_entries", replication.DefaultOplogBatchMaxEntries, "most entries one oplog batch (one etcd transaction) carries")
	fs.IntVar(&o.oplogPipelineDepth, "oplog_pipeline_depth", replication.DefaultOplogPipelineDepth, "most oplog batches the leader writes to etcd at once (acknowledged in order)")
	fs.IntVar(&o.haLease, "master_view_lease_ttl_sec", replication.MasterViewLeaseTTL, "lease of the master view key (etcd lease, or Redis expiry), seconds: a dead leader's key outlives it by up to this long, so it bounds failover (etcd grants no lease shorter than 1.5 election timeouts: 1.5 s with its defaults)")
	fs.IntVar(&o.oplogRetrySec, "batch_oplog_retry_timeout_sec", int(replication.DefaultOplogRetryTimeout/time.Second), "seconds an oplog batch write retries etcd errors before the leader steps down")
	declareSnapshotFlags(fs, &o.snapshot)
	fs.StringVar(&o.memoryAllocator, "memory_allocator", "offset", "segment allocator (only offset)")
	fs.StringVar(&o.allocStrat, "allocation_strategy", "random", "replica placement strategy (only random)")
	fs.IntVar(&o.rpcThreads, "rpc_thread_num", 0, "threads that run the master's RPC handling at once (GOMAXPROCS, at most the CPU count); 0 means --max_threads")
	fs.IntVar(&o.maxThreads, "max_threads", 16, "the default of --rpc_thread_num")
	fs.IntVar(&o.rpcConnTimeout, "rpc_conn_timeout_seconds", 0, "close an RPC connection idle for this many seconds (0: never); clients dial again")
	fs.BoolVar(&o.rpcNoDelay, "rpc_enable_tcp_no_delay", true, "set TCP_NODELAY on RPC connections (false: leave Nagle's algorithm on)")
	declareOffloadFlags(fs, o)
	declareTaskFlags(fs, o)
	declareDynReplFlags(fs, o)
	declareTenantPolicyFlags(fs, &o.tenantPolicy)
	declareUnsupportedFlags(fs, &o.unsupported)
	declareKVEventsFlags(fs, o)
	fs.BoolVar(&o.cfg.MultiTenant, "enable_multi_tenants", false, "isolate tenants: per-tenant key namespaces and quotas (admin API /api/v1/tenant_quotas on the metrics port)")
	fs.BoolVar(&o.requireClientSecret, "require_client_secret", false, "refuse every call that names a client id without a client secret (mooncake-client-secret metadata, which our clients send); on with --tenant_tokens_file. Off: a client that sends a secret is still protected once registered, and clients that send none work as upstream's")
	fs.BoolVar(&o.adminAllowRemote, "admin_allow_remote", false, "without --tenant_tokens_file, let admin requests that change state (tenant quotas, drain jobs) come from other hosts; by default only loopback callers may make them")
	fs.StringVar(&o.tenantTokensFile, "tenant_tokens_file", "", "with --enable_multi_tenants: file of \"tenant_id token\" lines (\"_admin token\" for the admin API); each client must present its tenant's token (MC_TENANT_TOKEN), the admin endpoints a Bearer token. Empty: any client may name any tenant (upstream)")
	o.tls.AddFlags(fs)
	// glog's flags, which upstream's launch scripts pass.
	fs.IntVar(&o.minLogLevel, "minloglevel", 0, "glog compatibility: 0 info, 1 warning, 2 error (overrides MC_LOG_LEVEL)")
	fs.IntVar(&o.verbosity, "v", 0, "glog compatibility: above 0 adds debug messages (overrides MC_LOG_LEVEL)")
	fs.BoolVar(&o.logToStderr, "logtostderr", true, "glog compatibility: logs always go to stderr (false is refused)")
	fs.BoolVar(&o.logToStderr, "alsologtostderr", true, "glog compatibility: alias of --logtostderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\n"+
			"Runs the Mooncake KV store master (metadata service). Flags accept --flag=value or\n"+
			"--flag value; booleans --flag or --flag=true.\n\nFlags:\n", fs.Name())
		fs.PrintDefaults()
	}
	return fs
}

// parse reads args into options, with usage errors for bad input.
func parse(args []string, out io.Writer) (*options, error) {
	o := &options{}
	fs := newFlagSet(o, out)
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	fail := func(format string, a ...any) (*options, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintln(out, err)
		return nil, cli.UsageError{Err: err}
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rpc_port"] && set["port"] {
		o.rpcPort = o.port
	}
	switch {
	case o.rpcThreads < 0:
		return fail("--rpc_thread_num=%d: want 0 (use --max_threads) or a positive number", o.rpcThreads)
	case o.maxThreads < 1:
		return fail("--max_threads=%d: want a positive number", o.maxThreads)
	case o.rpcThreads == 0:
		o.rpcThreads = o.maxThreads
	}
	if o.rpcConnTimeout < 0 {
		return fail("--rpc_conn_timeout_seconds=%d: want 0 (never) or a positive number", o.rpcConnTimeout)
	}
	if o.httpMetadataMaxKeys < 0 || o.httpMetadataMaxBytes < 0 {
		return fail("--http_metadata_server_max_keys and --http_metadata_server_max_bytes must be 0 (no limit) or positive")
	}
	if err := checkTaskFlags(o); err != nil {
		return fail("%v", err)
	}
	if err := checkDynReplFlags(o); err != nil {
		return fail("%v", err)
	}
	if err := o.cfg.Validate(); err != nil {
		return fail("%v", err)
	}
	if err := checkOffloadFlags(o); err != nil {
		return fail("%v", err)
	}
	if err := o.unsupported.check(); err != nil {
		return fail("%v", err)
	}
	policyFile, err := o.tenantPolicy.check(o.cfg.MultiTenant, o.enableHA)
	if err != nil {
		return fail("%v", err)
	}
	o.tenantPolicyFile = policyFile
	if err := checkKVEventsFlags(o); err != nil {
		return fail("%v", err)
	}
	if !o.logToStderr {
		return fail("--logtostderr=false is not supported: mooncake_master logs to stderr only (redirect it to a file)")
	}
	if set["minloglevel"] || set["v"] {
		l := logging.GlogLevel(o.minLogLevel, o.verbosity)
		o.glogLevel = &l
	}
	if o.memoryAllocator != "offset" {
		return fail("--memory_allocator=%s is not supported (only offset)", o.memoryAllocator)
	}
	if o.allocStrat != "random" {
		return fail("--allocation_strategy=%s is not supported (only random)", o.allocStrat)
	}
	snapshots, err := o.snapshot.config(o.enableOplog)
	if err != nil {
		return fail("%v", err)
	}
	o.snapshotConfig = snapshots
	if o.enableOplog && !o.enableHA {
		return fail("--enable_oplog needs --enable_ha on etcd (the oplog lives in the HA backend, etcd)")
	}
	if o.oplogPollMs <= 0 || o.oplogBatchMax <= 0 || o.oplogRetrySec <= 0 || o.oplogPipelineDepth <= 0 || o.haLease <= 0 {
		return fail("--oplog_poll_interval_ms, --oplog_batch_max_entries, --oplog_pipeline_depth, --batch_oplog_retry_timeout_sec and --master_view_lease_ttl_sec must be positive")
	}
	if err := checkHABackend(o.haBackendType); err != nil {
		return fail("%v", err)
	}
	if o.enableHA {
		if o.haConnString == "" {
			o.haConnString = o.etcdEndpoints
		}
		if len(replication.ParseEndpoints(o.haConnString)) == 0 {
			return fail("--enable_ha needs --ha_backend_connstring or --etcd_endpoints")
		}
		if o.haBackendType == "redis" {
			opts, err := redis.OptionsFromEnv(o.haConnString)
			if err != nil {
				return fail("--ha_backend_connstring: %v", err)
			}
			o.haRedis = &opts
			if err := (replication.HAConfig{Redis: o.haRedis, Oplog: o.enableOplog}).Check(); err != nil {
				return fail("%v", err)
			}
		}
	}
	return o, nil
}

// run parses args, serves until a value arrives on stop, then shuts down.
// Usage goes to out. It returns flag.ErrHelp for --help.
func run(args []string, out io.Writer, stop <-chan os.Signal) error {
	o, err := parse(args, out)
	if err != nil {
		return err
	}
	if o.glogLevel != nil {
		logging.SetupLevel(*o.glogLevel)
	}
	log := slog.Default()
	runtime.GOMAXPROCS(min(o.rpcThreads, runtime.NumCPU()))
	rpcAddr := net.JoinHostPort(o.rpcAddress, strconv.Itoa(o.rpcPort))
	sc := master.ServiceConfig{
		RPCAddress:     rpcAddr,
		MetricsAddress: net.JoinHostPort(o.metricsHost, strconv.Itoa(o.metricsPort)),
		RPCIdleTimeout: time.Duration(o.rpcConnTimeout) * time.Second,
		RPCNagle:       !o.rpcNoDelay,
		Server: master.Options{
			Config: o.cfg, CleanupMetadataOnTimeout: o.cleanupOnTimeout,
			Logger: log, ClusterID: o.clusterID, AdminAllowRemote: o.adminAllowRemote,
			RequireClientSecret: o.requireClientSecret, TenantPolicyFile: o.tenantPolicyFile,
		},
		Logger: log,
	}
	if sc.TLS, err = o.tls.Server(); err != nil {
		return err
	}
	if o.tenantTokensFile != "" {
		tt, err := master.LoadTenantTokens(o.tenantTokensFile)
		if err != nil {
			return err
		}
		sc.Server.TenantTokens = tt
		log.Info("tenant tokens loaded", "file", o.tenantTokensFile, "tenants", tt.Tenants())
	}
	if o.enableHTTPMetadata {
		sc.HTTPMetadataAddress = net.JoinHostPort(o.httpMetadataHost, strconv.Itoa(o.httpMetadataPort))
		sc.HTTPMetadataLimits = &metaserver.Limits{MaxKeys: o.httpMetadataMaxKeys, MaxBytes: o.httpMetadataMaxBytes}
	}
	if o.enableHA {
		sc.HA = &replication.HAConfig{
			Endpoints: replication.ParseEndpoints(o.haConnString), ClusterID: o.clusterID,
			Advertise: rpcAddr, Grace: -1, LeaseTTL: o.haLease,
			Oplog: o.enableOplog, OplogBatchMaxEntries: o.oplogBatchMax, OplogPipelineDepth: o.oplogPipelineDepth,
			OplogRetryTimeout: time.Duration(o.oplogRetrySec) * time.Second,
			OplogPollInterval: time.Duration(o.oplogPollMs) * time.Millisecond,
			Snapshot:          o.snapshotConfig,
		}
		if o.haRedis != nil {
			sc.HA.Endpoints, sc.HA.Redis = nil, o.haRedis
		} else {
			etcdTLS, err := o.tls.Client()
			if err != nil {
				return err
			}
			sc.HA.TLS = tlsconf.ForEtcd(etcdTLS, sc.HA.Endpoints)
		}
		if ip := net.ParseIP(o.rpcAddress); ip != nil && ip.IsUnspecified() {
			log.Warn("HA: --rpc_address is unspecified; clients on other hosts cannot reach the advertised leader address", "advertise", rpcAddr)
		}
	}
	log.Info("mooncake_master starting",
		"rpc_address", rpcAddr, "rpc_threads", runtime.GOMAXPROCS(0), "rpc_conn_timeout", sc.RPCIdleTimeout,
		"rpc_enable_tcp_no_delay", o.rpcNoDelay, "metrics", sc.MetricsAddress,
		"default_kv_lease_ttl", o.cfg.DefaultLeaseTTL, "default_kv_soft_pin_ttl", o.cfg.DefaultSoftPinTTL,
		"max_kv_soft_pin_ttl", o.cfg.MaxSoftPinTTL, "allow_evict_soft_pinned_objects", o.cfg.AllowEvictSoftPinned,
		"eviction_ratio", o.cfg.EvictionRatio, "eviction_high_watermark_ratio", o.cfg.EvictionHighWatermarkRatio,
		"client_ttl", o.cfg.ClientTTL, "client_dead_ttl", o.cfg.ClientDeadTTL, "put_start_discard_timeout", o.cfg.PutStartDiscardTimeout,
		"put_start_release_timeout", o.cfg.PutStartReleaseTimeout,
		"enable_http_metadata_server", o.enableHTTPMetadata, "http_metadata", sc.HTTPMetadataAddress,
		"enable_metadata_cleanup_on_timeout", o.cleanupOnTimeout,
		"enable_ha", o.enableHA, "ha_backend_type", o.haBackendType, "ha_backend_connstring", o.haConnString, "cluster_id", o.clusterID,
		"enable_oplog", o.enableOplog,
		"enable_multi_tenants", o.cfg.MultiTenant, "root_fs_dir", o.cfg.FS.RootDir)

	events, err := startKVEvents(o, log)
	if err != nil {
		return err
	}
	if events != nil {
		defer events.Close()
		sc.Server.Config.KVEvents = events
	}
	svc, err := master.StartService(sc)
	if err != nil {
		return err
	}
	var report <-chan time.Time
	if o.enableMetricReporting {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		report = t.C
	}
	for {
		select {
		case sig := <-stop:
			log.Info("mooncake_master stopping", "signal", fmt.Sprint(sig))
			svc.Close()
			return nil
		case <-report:
			st := svc.Server.Stats()
			log.Info("master metrics", "keys", st.KeyCount, "allocated_bytes", st.AllocatedBytes,
				"capacity_bytes", st.CapacityBytes, "active_clients", st.ActiveClients,
				"evicted_keys", st.EvictedKeys, "leader", svc.Server.IsLeader())
		}
	}
}
