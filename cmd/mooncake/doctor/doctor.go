// Package doctor checks a live Mooncake deployment from one host and says
// what is wrong and how to fix it: the master, the metadata server, etcd,
// the ports the processes will bind, the MC_*/MOONCAKE_* variables, proxy
// variables, RDMA devices, memory limits, the clock and which path
// same-host collectives take. Each check is in
// its own file and returns Results; Run runs them all. The wording of
// known problems comes from cmd/mooncake/troubleshoot, which the binaries
// also log. `mooncake doctor` (cmd/mooncake) is the command line.
package doctor

import (
	"context"
	"os"
	"time"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/internal/envvars"
)

// Status is a check's verdict.
type Status string

// Verdicts.
const (
	OK      Status = "ok"
	Warning Status = "warning"
	Failure Status = "failure"
	// Skipped means the check does not apply to this deployment (no
	// etcd in use, no master to compare with).
	Skipped Status = "skipped"
)

// Result is the outcome of one check.
type Result struct {
	// Check names the check ("master", "metadata", "env", ...).
	Check string `json:"check"`
	// Status is the verdict.
	Status Status `json:"status"`
	// Message says what was found.
	Message string `json:"message"`
	// Fix says what to do; empty for ok and skipped.
	Fix string `json:"fix,omitempty"`
	// Problem is the troubleshoot.Problem ID, when the finding is one.
	Problem string `json:"problem,omitempty"`
}

// Config is what the checks look at. Zero fields mean the defaults that
// DefaultConfig fills in.
type Config struct {
	// Master is the master's RPC address ("host:port"), or
	// "etcd://h1:2379;h2:2379" to find the elected leader; empty skips the
	// master checks.
	Master string
	// MetricsPort is the master's admin HTTP port (--metrics_port).
	MetricsPort int
	// Metadata is the Transfer Engine metadata connection string
	// ("http://h:8080/metadata", "etcd://h:2379", "P2PHANDSHAKE"); empty
	// skips the metadata checks.
	Metadata string
	// RPCPort, HTTPMetadataPort are the ports a mooncake_master on this
	// host binds (--rpc_port, --http_metadata_server_port), checked with
	// MetricsPort.
	RPCPort, HTTPMetadataPort int
	// GlobalSegmentSize and LocalBufferSize are what a store client on
	// this host contributes and stages (setup's arguments), in bytes.
	GlobalSegmentSize, LocalBufferSize uint64
	// ShmPath is the shared-memory file system to check (/dev/shm).
	ShmPath string
	// InfinibandPath is the sysfs directory of RDMA devices
	// (/sys/class/infiniband).
	InfinibandPath string
	// ProcPath is the proc file system (/proc): meminfo, net/tcp.
	ProcPath string
	// Timeout bounds each network check.
	Timeout time.Duration
	// Environ is the environment to check (os.Environ()).
	Environ []string
	// CoordinatorBin is the mooncake_pg_coordinator command to look for
	// ("": the one beside this command).
	CoordinatorBin string
}

// DefaultConfig is the configuration of a local deployment with upstream's
// default ports, the metadata server from MC_METADATA_SERVER, and this
// process's environment.
func DefaultConfig() Config {
	return Config{
		Master: "127.0.0.1:50051", MetricsPort: 9003, Metadata: envvars.MetadataServer.Value(),
		RPCPort: 50051, HTTPMetadataPort: 8080,
		ShmPath: "/dev/shm", InfinibandPath: "/sys/class/infiniband", ProcPath: "/proc",
		Timeout: 3 * time.Second, Environ: os.Environ(),
	}
}

// Run runs every check and returns their results in a fixed order.
func Run(ctx context.Context, cfg Config) []Result {
	env := parseEnviron(cfg.Environ)
	m := checkMaster(ctx, cfg, env)
	var out []Result
	out = append(out, m.results...)
	out = append(out, checkMetadata(ctx, cfg, env, m)...)
	out = append(out, checkEtcd(ctx, cfg)...)
	out = append(out, checkPorts(cfg, env, m)...)
	out = append(out, checkEnv(env)...)
	out = append(out, checkProxy(cfg, env)...)
	rdma := checkRDMA(cfg)
	out = append(out, rdma.results...)
	out = append(out, checkMemory(cfg, env, rdma.devices > 0)...)
	out = append(out, checkCollectivesPath(cfg, env), checkCoordinator(cfg, env))
	return out
}

// Counts returns how many results have each status.
func Counts(rs []Result) map[Status]int {
	n := map[Status]int{OK: 0, Warning: 0, Failure: 0, Skipped: 0}
	for _, r := range rs {
		n[r.Status]++
	}
	return n
}

func ok(check, msg string) Result      { return Result{Check: check, Status: OK, Message: msg} }
func skipped(check, msg string) Result { return Result{Check: check, Status: Skipped, Message: msg} }

// problem is a warning or failure that is a known problem: the fix is the
// problem's.
func problem(check string, st Status, p *troubleshoot.Problem, msg string) Result {
	return Result{Check: check, Status: st, Message: msg, Fix: p.Fix, Problem: p.ID}
}

// finding is a warning or failure with its own fix.
func finding(check string, st Status, msg, fix string) Result {
	return Result{Check: check, Status: st, Message: msg, Fix: fix}
}
