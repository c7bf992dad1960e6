package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// options are the parsed flags.
type options struct {
	host, metadataServer, deviceNames string
	masterAddress, protocol, tenantID string
	port, httpPort, threads           int
	setupTimeout                      int // seconds; 0: retry setup until stopped
	globalSegmentSize                 uint64
	localBufferSize                   uint64
	enableOffload, startOffloadRPC    bool
	enableHTTPServer                  bool
	logDir                            string
	allowedUIDs, allowedGIDs          []uint32
	maxRequestsPerDummy               int
	maxRequestsInFlight               int
	dummyReplyTimeout                 int // seconds
	tls                               tlsconf.Files
}

// size is a flag holding a byte count written as upstream accepts it:
// "4 GB", "512MB", "1GiB", "4096".
type size struct{ p *uint64 }

var sizeRE = regexp.MustCompile(`^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b?)\s*$`)

// parseSize reads a size with 1024-based units.
func parseSize(s string) (uint64, error) {
	m := sizeRE.FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return 0, fmt.Errorf("invalid size %q (bytes, or a number with KB, MB, GB, TB)", s)
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]float64{"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}[m[2]]
	v := f * unit
	if v > math.MaxUint64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return uint64(v), nil
}

func (z size) String() string {
	if z.p == nil {
		return ""
	}
	return strconv.FormatUint(*z.p, 10)
}

func (z size) Set(s string) error {
	v, err := parseSize(s)
	if err != nil {
		return err
	}
	*z.p = v
	return nil
}

func newFlagSet(o *options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("mooncake_client", flag.ContinueOnError)
	fs.SetOutput(out)
	o.globalSegmentSize = 4 << 30
	fs.StringVar(&o.host, "host", "", "local hostname of the store client, published as its segment's name (a port is picked in [MC_STORE_CLIENT_MIN_PORT, MC_STORE_CLIENT_MAX_PORT] when none is given); also the host of the HTTP server. Default: the local address of the route to the master (127.0.0.1 with a loopback master); a loopback or wildcard address is refused when the master is on another host")
	fs.StringVar(&o.metadataServer, "metadata_server", "http://127.0.0.1:8080/metadata", "Transfer Engine metadata server (http://..., etcd://..., P2PHANDSHAKE)")
	fs.StringVar(&o.deviceNames, "device_names", "", "RDMA devices, comma-separated (empty: auto)")
	fs.StringVar(&o.masterAddress, "master_server_address", "127.0.0.1:50051", "master host:port, or etcd://h1:p1;h2:p2 to follow an HA leader")
	fs.StringVar(&o.protocol, "protocol", "tcp", "transport: tcp or rdma")
	fs.IntVar(&o.port, "port", 50052, "names the Unix socket dummy clients connect to (@mooncake_client_<port>.sock; setup_dummy's server_address is host:<port>) and is the TCP port that accepts connections once the daemon is ready (readiness only)")
	fs.Var(size{&o.globalSegmentSize}, "global_segment_size", "memory this client contributes to the pool (\"4 GB\", \"512MB\", bytes)")
	fs.Var(size{&o.localBufferSize}, "local_buffer_size", "the daemon's own staging buffer (dummies stage through theirs)")
	fs.IntVar(&o.threads, "threads", 1, "accepted for compatibility (>= 1): dummy calls are served concurrently regardless")
	fs.StringVar(&o.tenantID, "tenant_id", "default", "tenant (keyspace) of every request; setup_dummy(keyspace=...) must match it")
	fs.BoolVar(&o.enableOffload, "enable_offload", false, "SSD offload tier (not in this build: true is refused)")
	fs.BoolVar(&o.startOffloadRPC, "start_offload_rpc_server", true, "accepted for compatibility; only meaningful with --enable_offload")
	fs.BoolVar(&o.enableHTTPServer, "enable_http_server", false, "serve /metrics and /health on --http_port")
	fs.IntVar(&o.httpPort, "http_port", 9300, "port of the HTTP server")
	fs.IntVar(&o.setupTimeout, "setup_timeout", 0, "seconds to keep retrying setup while the metadata server or master is unreachable (0: until SIGTERM/SIGINT)")
	fs.Var(idList{ids: &o.allowedUIDs}, "allowed_uids", "users, besides the daemon's own, whose processes may connect as dummy clients: comma-separated uids or names (root only when listed or when the daemon is root)")
	fs.Var(idList{ids: &o.allowedGIDs, groups: true}, "allowed_gids", "groups whose members (primary or supplementary gid) may connect as dummy clients: comma-separated gids or names")
	fs.IntVar(&o.maxRequestsPerDummy, "max_requests_per_dummy", ipc.DefaultMaxInFlight, "calls one dummy connection may have served at once; beyond it the daemon reads no more of that connection until one is answered")
	fs.IntVar(&o.maxRequestsInFlight, "max_requests_in_flight", ipc.DefaultSharedRequests, "calls of all dummies served at once; beyond it new calls wait")
	fs.IntVar(&o.dummyReplyTimeout, "dummy_reply_timeout_seconds", int(ipc.DefaultReplyTimeout/time.Second), "a dummy connection whose reply is not read within this many seconds is closed, freeing what its calls held")
	fs.StringVar(&o.logDir, "log_dir", "", "glog compatibility: logs always go to stderr (a directory is refused)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\n"+
			"Runs a standalone store client (the real client as a daemon): it mounts its segment,\n"+
			"serves dummy clients (MooncakeDistributedStore.setup_dummy) on a Unix socket of this\n"+
			"host, and unmounts on SIGTERM or SIGINT. Hot cache: MC_STORE_LOCAL_HOT_CACHE_SIZE,\n"+
			"MC_STORE_LOCAL_HOT_BLOCK_SIZE, MC_STORE_LOCAL_HOT_CACHE_USE_SHM=1,\n"+
			"MC_STORE_LOCAL_HOT_MAX_AGE_MS (see docs/store-deployment.md). Only processes of the daemon's own\n"+
			"uid, and those --allowed_uids and --allowed_gids name, may connect; the kernel's\n"+
			"record of the peer (SO_PEERCRED) decides, and others are refused at once.\n\nFlags:\n", fs.Name())
		fs.PrintDefaults()
	}
	o.tls.AddFlags(fs)
	return fs
}

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
	switch {
	case fs.NArg() > 0:
		return fail("unexpected arguments: %q", fs.Args())
	case o.port <= 0 || o.port > 65535:
		return fail("invalid --port %d", o.port)
	case o.httpPort <= 0 || o.httpPort > 65535:
		return fail("invalid --http_port %d", o.httpPort)
	case o.setupTimeout < 0:
		return fail("invalid --setup_timeout %d (seconds, 0 to retry until stopped)", o.setupTimeout)
	case o.threads < 1:
		return fail("--threads must be at least 1")
	case o.maxRequestsPerDummy < 1 || o.maxRequestsInFlight < 1 || o.dummyReplyTimeout < 1:
		return fail("--max_requests_per_dummy, --max_requests_in_flight and --dummy_reply_timeout_seconds must be at least 1")
	case o.enableOffload:
		return fail("--enable_offload=true is not supported: this build has no SSD offload tier")
	case o.logDir != "":
		return fail("--log_dir is not supported: mooncake_client logs to stderr only (redirect it to a file)")
	case o.protocol != "tcp" && o.protocol != "rdma":
		return fail("--protocol=%s: want tcp or rdma", o.protocol)
	}
	return o, nil
}
