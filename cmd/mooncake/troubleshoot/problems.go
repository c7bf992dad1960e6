// Package troubleshoot is the catalog of known deployment problems: the
// strings that identify each in a log, its cause and its fix. It is the one
// wording of them: `mooncake doctor` prints it (for its checks and for the
// lines `mooncake doctor logs` finds) and the binaries log it with Hint
// when they meet the same condition. It depends on nothing else in the
// module; the binaries under cmd/ import it for their hints.
package troubleshoot

import "strings"

// Problem is one known problem.
type Problem struct {
	// ID names the problem in the doctor's JSON output.
	ID string
	// Patterns identify the problem in a log line (matched without
	// regard to case); our own wording and upstream's. Error codes are
	// found by their names instead (the doctor's code table, cmd/mooncake/doctor).
	Patterns []string
	// Cause says what is wrong; Fix what to do about it.
	Cause, Fix string
}

// Hint is the sentence a binary adds to its error when it meets the
// problem: the cause, the fix and a pointer to the doctor.
func (p *Problem) Hint() string {
	return p.Cause + "; fix: " + p.Fix + " (`mooncake doctor` checks the whole deployment)"
}

// Matches reports whether line shows the problem.
func (p *Problem) Matches(line string) bool {
	l := strings.ToLower(line)
	for _, pat := range p.Patterns {
		if strings.Contains(l, strings.ToLower(pat)) {
			return true
		}
	}
	return false
}

// The known problems. Fixes name our flags and variables.
var (
	PortInUse = &Problem{ID: "port-in-use",
		Patterns: []string{"address already in use"},
		Cause:    "another process is bound to the port",
		Fix:      "stop that process, or give this one a free port (mooncake_master --rpc_port=50052, --metrics_port, --http_metadata_server_port; MC_MIN_RPC_PORT/MC_MAX_RPC_PORT for engines)"}
	MetadataUnreachable = &Problem{ID: "metadata-unreachable",
		Patterns: []string{"Error from etcd client", "connect etcd"},
		Cause:    "the metadata server (etcd or HTTP) does not answer or refuses the request",
		Fix:      "start it (mooncake_master --enable_http_metadata_server, mooncake_http_metadata_server, or etcd) and check the metadata_server string; bind etcd to an address the clients reach (--listen-client-urls http://0.0.0.0:2379 --advertise-client-urls http://<ip>:2379); unset http_proxy/https_proxy or add the server to no_proxy"}
	MasterUnreachable = &Problem{ID: "master-unreachable",
		Patterns: []string{"connection refused"},
		Cause:    "the master (or another peer) does not accept connections at that address",
		Fix:      "start mooncake_master, check master_server_address (host:port of --rpc_port) and that no firewall or proxy is in the way"}
	NoMasterElected = &Problem{ID: "no-master-elected",
		Patterns: []string{"no master elected"},
		Cause:    "etcd holds no master view for this cluster id: no master with --enable_ha runs, or MC_STORE_CLUSTER_ID differs from the masters' --cluster_id",
		Fix:      "start the HA masters, and use the same cluster id on masters (--cluster_id) and clients (MC_STORE_CLUSTER_ID)"}
	MasterStandby = &Problem{ID: "master-standby",
		Patterns: []string{"not the leader"},
		Cause:    "the master asked is a standby (or not yet serving) and refuses requests",
		Fix:      "connect through etcd (master_server_address=\"etcd://h1:2379;h2:2379\") so the client follows the elected leader"}
	InvalidEnv = &Problem{ID: "invalid-env",
		Patterns: []string{"it is ignored and the default"},
		Cause:    "an MC_*/MOONCAKE_* variable has a value the runtime cannot use",
		Fix:      "correct or unset the variable; `mooncake doctor` lists the accepted values"}
	SegmentNameMismatch = &Problem{ID: "segment-name-mismatch",
		Patterns: []string{"Failed to get description of", "metadata key not found"},
		Cause:    "no descriptor is published under that segment name: the peer is gone, its local_hostname differs, or it uses another MC_METADATA_CLUSTER_ID",
		Fix:      "open the segment by the peer's local_hostname (host:port) and use the same MC_METADATA_CLUSTER_ID on every process"}
	NoRDMADevice = &Problem{ID: "rdma-device-missing",
		Patterns: []string{"No matched device found"},
		Cause:    "the RDMA device named in the configuration does not exist",
		Fix:      "list devices with ibv_devices (or ls /sys/class/infiniband) and use those names; or MC_FORCE_TCP=true"}
	RDMAPortDown = &Problem{ID: "rdma-port-down",
		Patterns: []string{"port not active"},
		Cause:    "an RDMA port is not in the ACTIVE state",
		Fix:      "check the cable and the switch (ibv_devinfo | grep state), or choose another port with MC_IB_PORT"}
	RDMAHandshake = &Problem{ID: "rdma-handshake",
		Patterns: []string{"Failed to exchange handshake description", "Failed to modify QP to RTR"},
		Cause:    "the connection setup with a peer failed: MTU or GID differ, or the peer rejected it",
		Fix:      "set the same MC_MTU on both sides, a GID index that is not all zeros (MC_GID_INDEX), and read the peer's log"}
	MemoryRegistration = &Problem{ID: "memory-registration",
		Patterns: []string{"Failed to register memory", "out of mr size"},
		Cause:    "registering memory exceeded the locked-memory limit or the device's max_mr_size",
		Fix:      "raise the memlock limit (ulimit -l unlimited; /etc/security/limits.conf: * soft memlock unlimited, * hard memlock unlimited) or register smaller buffers"}
	TooManyQPs = &Problem{ID: "too-many-qps",
		Patterns: []string{"Failed to create QP"},
		Cause:    "the RDMA device ran out of queue pairs",
		Fix:      "MC_ENABLE_DEST_DEVICE_AFFINITY=1 (upstream) creates fewer QPs"}
	UnstableNetwork = &Problem{ID: "unstable-network",
		Patterns: []string{"Process failed for slice", "work request flushed error"},
		Cause:    "transfers failed on the network; flushed work requests follow an earlier error",
		Fix:      "find the first error in the log, check links with ib_write_bw or the TCP path with MC_FORCE_TCP=true"}
	TransferTimeout = &Problem{ID: "transfer-timeout",
		Patterns: []string{"i/o timeout", "deadline exceeded"},
		Cause:    "a transfer or RPC did not finish before its deadline: the peer is dead, overloaded or unreachable",
		Fix:      "check the peer is alive; raise MC_TRANSFER_TIMEOUT (seconds) or MC_RPC_TIMEOUT_MS if the network is just slow"}
	PGCoordinatorInRank0 = &Problem{ID: "pg-coordinator-in-rank0",
		Patterns: []string{"no mooncake_pg_coordinator command was found"},
		Cause:    "the process-group coordinator would run inside rank 0 (mooncake_pg_coordinator is not installed beside the library, or MC_PG_COORDINATOR=inprocess), so rank 0's death would end the job's fault tolerance",
		Fix:      "reinstall mooncake-go so that mooncake/bin/mooncake_pg_coordinator exists, unset MC_PG_COORDINATOR, or point it at a running mooncake_pg_coordinator (host:port)"}
	PGCoordinatorUnreachable = &Problem{ID: "pg-coordinator-unreachable",
		Patterns: []string{"want process, inprocess or host:port"},
		Cause:    "MC_PG_COORDINATOR names no coordinator the ranks can use: not process, inprocess or host:port, or nothing accepts connections there",
		Fix:      "start mooncake_pg_coordinator --host <ip> --port <port> where every rank reaches it, or unset MC_PG_COORDINATOR so that rank 0 starts one"}
)

// All is every known problem, in the order the doctor reports them.
var All = []*Problem{
	PortInUse, MetadataUnreachable, MasterUnreachable, NoMasterElected, MasterStandby, InvalidEnv,
	SegmentNameMismatch, NoRDMADevice, RDMAPortDown, RDMAHandshake,
	MemoryRegistration, TooManyQPs, UnstableNetwork, TransferTimeout,
	PGCoordinatorInRank0, PGCoordinatorUnreachable,
}

// Match returns the problems line shows.
func Match(line string) []*Problem {
	var out []*Problem
	for _, p := range All {
		if p.Matches(line) {
			out = append(out, p)
		}
	}
	return out
}

// HintFor returns the Hint of the first known problem err shows, or "".
// A binary prints it under its error.
func HintFor(err error) string {
	if err == nil {
		return ""
	}
	if ps := Match(err.Error()); len(ps) > 0 {
		return ps[0].Hint()
	}
	return ""
}
