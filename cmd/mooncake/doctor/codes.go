package doctor

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/transfer"
)

// CodeInfo explains one error number.
type CodeInfo struct {
	// Component is "store" (kvstore, mooncake.store) or "engine"
	// (transfer, mooncake.engine).
	Component string `json:"component"`
	Code      int    `json:"code"`
	// Name is upstream's name (NO_AVAILABLE_HANDLE, ERR_METADATA).
	Name string `json:"name"`
	// LogText is how our Go errors print the code.
	LogText string `json:"log_text"`
	Meaning string `json:"meaning"`
	Fix     string `json:"fix"`
}

type explanation struct{ meaning, fix string }

// storeExplanations explain the store's codes (kvstore/errors.go names
// them); a test checks every named code is here.
var storeExplanations = map[kvstore.ErrorCode]explanation{
	kvstore.OK:                       {"success", "nothing to fix"},
	kvstore.InternalError:            {"an unexpected failure inside the store or the library", "read the log lines just before it; a reproducible case is a bug to report"},
	kvstore.BufferOverflow:           {"the destination buffer is smaller than the object", "size the buffer with get_size(key) first"},
	kvstore.SegmentNotFound:          {"no mounted segment can take the replica, or the segment asked for (preferred_segment) is not mounted", "start store clients with global_segment_size > 0 and check the master lists them (mooncake doctor, /get_all_segments); fix preferred_segment names"},
	kvstore.SegmentAlreadyExists:     {"a segment with this name is already mounted", "give every client its own local_hostname (host:port)"},
	kvstore.ClientNotFound:           {"the master no longer knows the client: it was silent for longer than --client_dead_ttl and was forgotten", "the client remounts on its next ping; if it keeps happening, check the network to the master or raise --client_dead_ttl"},
	kvstore.NoAvailableHandle:        {"the memory pool has no room for the object", "increase global_segment_size or add clients; check eviction runs (--eviction_high_watermark_ratio) and that soft-pinned/hard-pinned objects do not fill the pool"},
	kvstore.InvalidKey:               {"the key is empty or not valid", "use a non-empty key"},
	kvstore.WriteFail:                {"writing the object's data failed", "see the transfer error logged before it; check the target client is alive"},
	kvstore.InvalidParams:            {"an argument is not valid (size 0, replica_num 0, a bad local_hostname, ...)", "check the arguments of the call that failed"},
	kvstore.IllegalClient:            {"the request came from a client that may not make it (e.g. put_end by another client than put_start's)", "finish a put from the client that started it"},
	kvstore.InvalidWrite:             {"a write to an object that is not being written", "start the put again"},
	kvstore.InvalidRead:              {"a read of an object that is not complete", "read after put has finished"},
	kvstore.InvalidReplica:           {"the replica is not valid", "retry; the object may have been evicted or its segment unmounted"},
	kvstore.ReplicaIsNotReady:        {"the object is still being written", "retry once the put has completed"},
	kvstore.ObjectNotFound:           {"the key does not exist: never put, removed, evicted, or lost with its segment's client", "check the key; if objects vanish, check eviction and client expiry (--client_dead_ttl, a client restarted on the same endpoint)"},
	kvstore.ObjectAlreadyExists:      {"a put of a key that exists", "use upsert, or remove the key first"},
	kvstore.ObjectHasLease:           {"the object is leased to a reader and cannot be removed now", "wait for the lease (--default_kv_lease_ttl) or remove with force"},
	kvstore.LeaseExpired:             {"the read lease ran out before the transfer finished", "raise --default_kv_lease_ttl on the master; check why transfers are slow (mooncake doctor)"},
	kvstore.ObjectReplicaBusy:        {"a replica is busy with another operation", "retry"},
	kvstore.ObjectHasReplicationTask: {"a copy or move task is working on the object", "wait until query_task reports SUCCESS or FAILED"},
	kvstore.ReplicaNotFound:          {"the object has no replica where the call says one is", "check the segment names with get_replica_desc"},
	kvstore.FileNotFound:             {"a file the call names does not exist (load_tensor_from_safetensor)", "check the path; it is opened by the calling process, on its host"},
	kvstore.UnableOffload:            {"the master runs without --enable_offload, so a storage client cannot mount its disk (setup with enable_ssd_offload)", "start mooncake_master with --enable_offload, or set the client up without enable_ssd_offload"},
	kvstore.TaskNotFound:             {"no copy or move task has this id (in the caller's tenant)", "use the id create_copy_task/create_move_task returned; finished tasks are kept for 10 minutes"},
	kvstore.TaskPendingLimitExceeded: {"the master holds --max_total_pending_tasks copy or move tasks not yet handed out", "wait for pending tasks to be processed, or raise --max_total_pending_tasks on the master"},
	kvstore.TransferFail:             {"moving the object's bytes failed", "read the engine error logged before it; check the peer is alive and reachable (mooncake probe, mooncake doctor)"},
	kvstore.ChecksumMismatch:         {"the bytes read differ from the checksum taken when the object was put (MOONCAKE_STORE_CHECKSUM)", "treat the read as failed and do not use the buffer; investigate the data path between writer and reader"},
	kvstore.RPCFail:                  {"an RPC to the master failed", "check the master is up and reachable (mooncake doctor --master host:port)"},
	kvstore.RPCTimeout:               {"the master did not answer within MC_RPC_TIMEOUT_MS", "check the master's load and the network; raise MC_RPC_TIMEOUT_MS"},
	kvstore.EtcdOperationError:       {"an etcd operation failed", "check etcd's health (mooncake doctor checks it; etcdctl endpoint health)"},
	kvstore.UnavailableInCurrentStatus: {"the master is not serving: it is an HA standby or not yet elected",
		"connect with master_server_address=\"etcd://...\" so the client follows the leader"},
	kvstore.NotSupported: {"the operation is not supported by Mooncake-Go", "see docs/store.md for what is implemented"},
	kvstore.TenantQuotaExceeded: {"the write would take the tenant past its quota (master --enable_multi_tenants)",
		"remove the tenant's objects, or raise its quota with the master's /api/v1/tenant_quotas"},
	kvstore.TenantNotRegistered: {"the tenant has no quota registered, so it may not write",
		"register the tenant's quota at the master's /api/v1/tenant_quotas, or check the client's tenant_id"},
	kvstore.TenantNotEmpty: {"the tenant still holds objects, so its quota cannot be removed", "remove the tenant's objects first"},
}

// engineExplanations explain the Transfer Engine's codes (transfer/errors.go
// names them), with upstream's names.
var engineExplanations = map[transfer.Code]struct {
	name string
	explanation
}{
	transfer.CodeInvalidArgument:      {"ERR_INVALID_ARGUMENT", explanation{"an argument is not valid, or a generic failure", "check the call's arguments and the error text"}},
	transfer.CodeTooManyRequests:      {"ERR_TOO_MANY_REQUESTS", explanation{"more requests than the batch was allocated for", "allocate the batch with room for every request"}},
	transfer.CodeAddressNotRegistered: {"ERR_ADDRESS_NOT_REGISTERED", explanation{"a local or remote address is outside the registered memory", "register the buffer (register_memory) before transferring, and use addresses inside the peer's buffers"}},
	transfer.CodeBatchBusy:            {"ERR_BATCH_BUSY", explanation{"the batch still has transfers in flight", "wait for every transfer of the batch before freeing it"}},
	transfer.CodeDeviceNotFound:       {"ERR_DEVICE_NOT_FOUND", explanation{"the device named does not exist", "list devices (ls /sys/class/infiniband, ibv_devices) and use their names, or MC_FORCE_TCP=true"}},
	transfer.CodeAddressOverlapped:    {"ERR_ADDRESS_OVERLAPPED", explanation{"the memory registered overlaps memory already registered", "register each range once"}},
	transfer.CodeDNS:                  {"ERR_DNS", explanation{"local_hostname is not a valid host name or IP", "use this host's IP or a resolvable name"}},
	transfer.CodeSocket:               {"ERR_SOCKET", explanation{"a socket could not be created, bound or connected", "check ports (mooncake doctor), MC_TCP_BIND_ADDRESS, and that the peer listens"}},
	transfer.CodeMalformedJSON:        {"ERR_MALFORMED_JSON", explanation{"a descriptor or handshake message is not valid JSON", "check that every process runs a compatible version"}},
	transfer.CodeRejectHandshake:      {"ERR_REJECT_HANDSHAKE", explanation{"the peer rejected the handshake", "read the peer's log for the reason"}},
	transfer.CodeMetadata:             {"ERR_METADATA", explanation{"the metadata server failed or holds no descriptor for the segment", "check the metadata server (mooncake doctor --metadata URL), the segment name and MC_METADATA_CLUSTER_ID"}},
	transfer.CodeEndpoint:             {"ERR_ENDPOINT", explanation{"a connection to the peer could not be set up", "check the peer is alive and reachable (mooncake probe SEGMENT)"}},
	transfer.CodeContext:              {"ERR_CONTEXT", explanation{"a device context could not be set up", "check the device and its driver"}},
	transfer.CodeNUMA:                 {"ERR_NUMA", explanation{"a NUMA placement failed", "check the location string given to register_memory"}},
	transfer.CodeClock:                {"ERR_CLOCK", explanation{"reading the clock failed", "check the host's clock source"}},
	transfer.CodeMemory:               {"ERR_MEMORY", explanation{"allocating or mapping memory failed", "check free memory, memlock and /dev/shm (mooncake doctor)"}},
	transfer.CodeNotImplemented:       {"ERR_NOT_IMPLEMENTED", explanation{"the feature is not implemented in Mooncake-Go", "see docs/transfer-engine.md for what is"}},
}

// AllCodes lists every explained code, store codes first, each in
// descending order.
func AllCodes() []CodeInfo {
	var out []CodeInfo
	for c, e := range storeExplanations {
		out = append(out, CodeInfo{Component: "store", Code: int(c), Name: c.String(), LogText: c.Error(), Meaning: e.meaning, Fix: e.fix})
	}
	for c, e := range engineExplanations {
		out = append(out, CodeInfo{Component: "engine", Code: int(c), Name: e.name,
			LogText: fmt.Sprintf("%s (%d)", c, int(c)), Meaning: e.meaning, Fix: e.fix})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Component != out[j].Component {
			return out[i].Component == "store"
		}
		return out[i].Code > out[j].Code
	})
	return out
}

// ExplainCode returns the explanations of an error number or name
// ("-200", "NO_AVAILABLE_HANDLE", "ERR_METADATA"): the store's and the
// engine's when the number means something to both.
func ExplainCode(s string) []CodeInfo {
	s = strings.TrimSpace(s)
	n, numErr := strconv.Atoi(s)
	var out []CodeInfo
	for _, c := range AllCodes() {
		if numErr == nil && c.Code == n || strings.EqualFold(c.Name, s) {
			out = append(out, c)
		}
	}
	return out
}
