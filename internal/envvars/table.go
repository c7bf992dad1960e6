package envvars

// The variables the Go runtime reads, each through its accessor.
var (
	LogLevel = &Var{Name: "MC_LOG_LEVEL", Kind: Enum, Values: []string{"-1", "0", "1", "2", "DEBUG", "INFO", "WARNING", "ERROR"}, Default: "0",
		ReadBy: "internal/logging", Doc: "log level: -1 (DEBUG), 0 (INFO), 1 (WARNING), 2 (ERROR)"}

	TransferTimeout = &Var{Name: "MC_TRANSFER_TIMEOUT", Kind: Seconds, Min: 0.001, Default: "30",
		ReadBy: "transfer", Doc: "deadline of one transfer, seconds"}
	ForceTCP = &Var{Name: "MC_FORCE_TCP", Kind: Bool, Default: "false",
		ReadBy: "transfer", Doc: "use TCP to every peer (no shared memory)"}
	TCPBindAddress = &Var{Name: "MC_TCP_BIND_ADDRESS", Kind: IP, Default: "host of local_hostname if an IP, else all",
		ReadBy: "transfer", Doc: "address the engine's listeners bind to"}
	TCPLanesPerPeer = &Var{Name: "MC_TCP_LANES_PER_PEER", Kind: Int, Min: 1, Default: "4",
		ReadBy: "transfer", Doc: "TCP connections per peer"}
	TCPSyncSpinUs = &Var{Name: "MC_TCP_SYNC_SPIN_US", Kind: Int, Min: 0, Default: "60",
		ReadBy: "transfer", Doc: "a synchronous one-slice TCP transfer polls for its reply this long before sleeping in poll(2), microseconds (0: sleep right after the spin)"}
	TCPStallTimeoutMs = &Var{Name: "MC_TCP_STALL_TIMEOUT_MS", Kind: Int, Min: 1, Default: "1000",
		ReadBy: "transfer", Doc: "a TCP data connection whose sent data stays unacknowledged this long (or whose peer stops answering keepalives) is abandoned and the request goes again on a fresh one, milliseconds"}
	MinRPCPort = &Var{Name: "MC_MIN_RPC_PORT", Kind: Int, Min: 1, Max: 65535, Default: "15000",
		ReadBy: "transfer", Doc: "lowest handshake port the engine binds"}
	MaxRPCPort = &Var{Name: "MC_MAX_RPC_PORT", Kind: Int, Min: 1, Max: 65535, Default: "17000",
		ReadBy: "transfer", Doc: "highest handshake port the engine binds"}
	HandshakeMaxLength = &Var{Name: "MC_HANDSHAKE_MAX_LENGTH", Kind: Int, Min: 1, Max: 128 << 20, Default: "1048576",
		ReadBy: "transfer", Doc: "largest handshake message, bytes"}
	MetadataClusterID = &Var{Name: "MC_METADATA_CLUSTER_ID", Kind: Text, Default: "none",
		ReadBy: "transfer", Doc: "prefix of the engine's metadata keys: mooncake/<id>/..."}
	FaultInjection = &Var{Name: "MC_TE_FAULT_INJECTION", Kind: Enum, Values: []string{"0", "1"}, Default: "0",
		ReadBy: "transfer", Doc: "test only: 1 allows injected link failures"}

	StoreClusterID = &Var{Name: "MC_STORE_CLUSTER_ID", Kind: Text, Default: "mooncake_cluster",
		ReadBy: "kvstore/client, mooncake_master", Doc: "HA cluster id: etcd key mooncake-store/<id>/master_view, Redis hash mooncake-store/{<id>}/master_view"}
	StoreClientMinPort = &Var{Name: "MC_STORE_CLIENT_MIN_PORT", Kind: Int, Min: 1, Max: 65535, Default: "12300",
		ReadBy: "kvstore/client", Doc: "lowest port picked for a local_hostname without one"}
	StoreClientMaxPort = &Var{Name: "MC_STORE_CLIENT_MAX_PORT", Kind: Int, Min: 1, Max: 65535, Default: "14300",
		ReadBy: "kvstore/client", Doc: "highest port picked for a local_hostname without one"}
	StoreClientSetupRetries = &Var{Name: "MC_STORE_CLIENT_SETUP_RETRIES", Kind: Int, Min: 1, Default: "20",
		ReadBy: "kvstore/client", Doc: "ports tried in that range"}
	RPCTimeoutMs = &Var{Name: "MC_RPC_TIMEOUT_MS", Kind: Int, Min: 1, Default: "10000",
		ReadBy: "kvstore/client", Doc: "timeout of one master RPC, ms"}
	StoreMasterRPC = &Var{Name: "MC_STORE_MASTER_RPC", Kind: Enum, Values: []string{"framed", "grpc"}, Default: "framed",
		ReadBy: "kvstore/client", Doc: "transport of the client's master calls: framed (same port, fewer hand-offs) or grpc"}
	StoreMasterSpinUs = &Var{Name: "MC_STORE_MASTER_SPIN_US", Kind: Int, Min: 0, Default: "0",
		ReadBy: "kvstore/client", Doc: "a framed master call busy-polls for its reply this long before yield-polling, microseconds (0: no busy-polling)"}
	StoreMasterYieldUs = &Var{Name: "MC_STORE_MASTER_YIELD_US", Kind: Int, Min: 0, Default: "200",
		ReadBy: "kvstore/client", Doc: "then polls this long more, yielding the CPU (sched_yield) between polls, before sleeping in poll(2), microseconds (0: sleep right after the spin)"}
	StoreTwoPhasePut = &Var{Name: "MC_STORE_TWO_PHASE_PUT", Kind: Bool, Default: "false",
		ReadBy: "kvstore/client", Doc: "every put takes two master round trips (put start, put end) instead of writing small default-placed objects into reserved space and committing them with one"}
	StoreChecksum = &Var{Name: "MOONCAKE_STORE_CHECKSUM", Kind: Bool, Default: "false",
		ReadBy: "kvstore/client", Doc: "CRC-64 of whole objects, checked on get"}
	StoreTenantToken = &Var{Name: "MC_TENANT_TOKEN", Kind: Text, Default: "none",
		ReadBy: "kvstore/client", Doc: "secret sent with every master call as the tenant's token; a master with --tenant_tokens_file refuses a tenant's calls without it (ILLEGAL_CLIENT)",
		Secret: true}

	StoreDaemonUID = &Var{Name: "MC_STORE_DAEMON_UID", Kind: Int, Min: 1, Max: 4294967294, Default: "none (the dummy's own euid, or root)",
		ReadBy: "kvstore/standalone", Doc: "a dummy client also accepts a mooncake_client running as this uid (any other owner of the socket is refused before a byte is sent)"}

	StoreHotCacheSize = &Var{Name: "MC_STORE_LOCAL_HOT_CACHE_SIZE", Kind: Int, Min: 1, Default: "0 (no hot cache)",
		ReadBy: "kvstore/hotcache", Doc: "bytes of hot cache: per worker scope of a mooncake_client, or of a client set up in process"}
	StoreHotBlockSize = &Var{Name: "MC_STORE_LOCAL_HOT_BLOCK_SIZE", Kind: Int, Min: 1, Default: "16777216",
		ReadBy: "kvstore/hotcache", Doc: "hot cache block: largest object cached, bytes"}
	StoreHotCacheUseShm = &Var{Name: "MC_STORE_LOCAL_HOT_CACHE_USE_SHM", Kind: Enum, Values: []string{"0", "1"}, Default: "0",
		ReadBy: "kvstore/hotcache", Doc: "1: hot cache in shared memory that a mooncake_client's dummy clients of the scope map and read"}
	StoreHotMaxAgeMs = &Var{Name: "MC_STORE_LOCAL_HOT_MAX_AGE_MS", Kind: Int, Min: 0, Default: "5000",
		ReadBy: "kvstore/hotcache", Doc: "hot cache entries older than this are not served (bounds staleness for writes made elsewhere); 0 no bound"}

	PGHostIP = &Var{Name: "MC_PG_HOST_IP", Kind: IP, Default: "local address of the route to MASTER_ADDR, 127.0.0.1 without MASTER_ADDR",
		ReadBy: "backend", Doc: "address a rank's engine and the coordinator it starts listen on and publish to the other ranks (mooncake.pg.set_host_ip overrides)"}
	PGInitTimeout = &Var{Name: "MC_PG_INIT_TIMEOUT", Kind: Seconds, Min: 0.001, Default: "300",
		ReadBy: "backend", Doc: "rendezvous deadline of a process group, seconds"}
	PGCoordinator = &Var{Name: "MC_PG_COORDINATOR", Kind: Text, Default: "process if mooncake_pg_coordinator is installed beside libmooncake.so, else inprocess",
		ReadBy: "backend", Doc: "where the process-group coordinator runs: process (a mooncake_pg_coordinator process that rank 0 starts and that outlives it), inprocess (inside rank 0: its death is not survived), or host:port of a running mooncake_pg_coordinator"}
	PGCoordinatorSecret = &Var{Name: "MC_PG_COORDINATOR_SECRET", Kind: Text, Default: "none (a coordinator rank 0 starts gets a random one, shared through the rendezvous store)",
		ReadBy: "backend, mooncake_pg_coordinator", Doc: "job secret of a coordinator an operator runs (MC_PG_COORDINATOR=host:port): set the same value for the coordinator and every rank; the coordinator refuses calls without it (unset on the coordinator: it admits every client)",
		Secret: true}
	PGHangTimeoutMs = &Var{Name: "MC_PG_HANG_TIMEOUT_MS", Kind: Int, Min: 0, Default: "0",
		ReadBy: "backend", Doc: "a collective that waits this long for a rank that answers probes but has not entered the collective fails that rank, milliseconds (0: never; a live rank is then waited for without end)"}
	PGDirectMax = &Var{Name: "MC_PG_DIRECT_MAX", Kind: Int, Min: 1, Default: "65536",
		ReadBy: "backend", Doc: "largest all_reduce done in one direct step, bytes"}
	PGAllReduceAlgo = &Var{Name: "MC_PG_ALLREDUCE_ALGO", Kind: Enum, Values: []string{"direct", "directpull", "rsag", "rspull"}, Default: "chosen by size",
		ReadBy: "backend", Doc: "force one all_reduce algorithm (benchmarking)"}
	PGAllGatherAlgo = &Var{Name: "MC_PG_ALLGATHER_ALGO", Kind: Enum, Values: []string{"direct", "pull", "cma"}, Default: "chosen by group size",
		ReadBy: "backend", Doc: "force one all_gather algorithm (benchmarking)"}
	PGAllToAllAlgo = &Var{Name: "MC_PG_ALLTOALL_ALGO", Kind: Enum, Values: []string{"pairwise", "cma"}, Default: "pairwise",
		ReadBy: "backend", Doc: "force one all_to_all algorithm (benchmarking; cma: read every block of 32 KiB or more with process_vm_readv where the group does)"}
	PGCMA = &Var{Name: "MC_PG_CMA", Kind: Enum, Values: []string{"0", "1"}, Default: "1",
		ReadBy: "backend", Doc: "0: never read same-host peers' buffers with process_vm_readv (two-rank all_gather of 4 MiB blocks, and all_to_all under MC_PG_ALLTOALL_ALGO=cma, copy through the group buffers)"}
	PGSpinUs = &Var{Name: "MC_PG_SPIN_US", Kind: Int, Min: 1, Default: "chosen by core count",
		ReadBy: "backend", Doc: "spin before yield-polling, microseconds (a group with more ranks than the host has CPUs spins in a collective's first wait only)"}
	PGYieldUs = &Var{Name: "MC_PG_YIELD_US", Kind: Int, Min: 0, Default: "500",
		ReadBy: "backend", Doc: "yield-polling after the spin, before blocking, microseconds (0: block right after the spin)"}
	PGSlotBytes = &Var{Name: "MC_PG_SLOT_BYTES", Kind: Int, Min: 1, Default: "chosen by group size",
		ReadBy: "backend", Doc: "collective slot size, bytes"}
	PGP2PSlotBytes = &Var{Name: "MC_PG_P2P_SLOT_BYTES", Kind: Int, Min: 1, Default: "1048576",
		ReadBy: "backend", Doc: "point-to-point slot size, bytes"}

	// The disk tier of a storage client (setup with enable_ssd_offload).
	OffloadFileStoragePath = &Var{Name: "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", Kind: Text, Default: "/data/file_storage",
		ReadBy: "kvstore/client, python", Doc: "disk tier directory when setup's ssd_offload_path is empty (also MooncakeConfig: ssd_offload_path)"}
	OffloadBackend = &Var{Name: "MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR", Kind: Text, Default: "bucket_storage_backend",
		ReadBy: "kvstore/client", Doc: "disk tier file layout; only bucket_storage_backend (any other value fails setup)"}
	OffloadLocalBufferSize = &Var{Name: "MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", Kind: Int, Min: 1, Default: "1342177280",
		ReadBy: "kvstore/client", Doc: "buffer that disk reads are served from, bytes"}
	OffloadTotalKeysLimit = &Var{Name: "MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT", Kind: Int, Min: 1, Default: "10000000",
		ReadBy: "kvstore/client", Doc: "most objects the disk tier holds"}
	OffloadTotalSizeLimit = &Var{Name: "MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", Kind: Int, Min: 1, Default: "2199023255552",
		ReadBy: "kvstore/client", Doc: "most bytes of objects the disk tier holds"}
	OffloadHeartbeatInterval = &Var{Name: "MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", Kind: Seconds, Min: 0.01, Default: "10",
		ReadBy: "kvstore/client", Doc: "offload heartbeat period (fetches offload and promotion work), seconds"}
	OffloadBufferGCInterval = &Var{Name: "MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_INTERVAL_SECONDS", Kind: Seconds, Min: 0.01, Default: "1",
		ReadBy: "kvstore/client", Doc: "sweep period of unreleased disk-read buffers, seconds"}
	OffloadBufferGCTTLMs = &Var{Name: "MOONCAKE_OFFLOAD_CLIENT_BUFFER_GC_TTL_MS", Kind: Int, Min: 1, Default: "5000",
		ReadBy: "kvstore/client", Doc: "age at which an unreleased disk-read buffer is freed, ms"}
	OffloadEnableEviction = &Var{Name: "MOONCAKE_OFFLOAD_ENABLE_EVICTION", Kind: Enum, Values: []string{"true", "false", "1", "0"}, Default: "true",
		ReadBy: "kvstore/client", Doc: "evict whole buckets when the disk tier is full (false: offloads fail instead)"}
	OffloadBucketKeysLimit = &Var{Name: "MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", Kind: Int, Min: 1, Default: "500",
		ReadBy: "kvstore/client", Doc: "most objects in one bucket file"}
	OffloadBucketSizeLimit = &Var{Name: "MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", Kind: Int, Min: 1, Default: "268435456",
		ReadBy: "kvstore/client", Doc: "most bytes in one bucket file (a larger object gets a bucket of its own)"}
	OffloadBucketMaxTotalSize = &Var{Name: "MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE", Kind: Int, Min: 0, Default: "0",
		ReadBy: "kvstore/client", Doc: "most bytes of all bucket files, 0 for no limit beyond the total size limit"}
	OffloadBucketEvictionPolicy = &Var{Name: "MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", Kind: Text, Default: "fifo",
		ReadBy: "kvstore/client", Doc: "which bucket goes when full: fifo (oldest written), lru (least recently read); anything else: none"}

	// MetadataServer is read by `mooncake doctor` as the default of --metadata.
	MetadataServer = &Var{Name: "MC_METADATA_SERVER", Kind: Text, Default: "none",
		ReadBy: "mooncake doctor", Doc: "metadata server the doctor checks when --metadata is not given"}
)

// All is every variable: those above, those read by Python, C++ and the
// scripts, and upstream's that Mooncake-Go does not read.
var All = []*Var{
	LogLevel, TransferTimeout, ForceTCP, TCPBindAddress, TCPLanesPerPeer, TCPSyncSpinUs, MinRPCPort, MaxRPCPort,
	HandshakeMaxLength, MetadataClusterID, FaultInjection,
	StoreClusterID, StoreClientMinPort, StoreClientMaxPort, StoreClientSetupRetries, RPCTimeoutMs, StoreMasterRPC, StoreMasterSpinUs, StoreMasterYieldUs, StoreTwoPhasePut, StoreChecksum, StoreTenantToken,
	StoreDaemonUID, StoreHotCacheSize, StoreHotBlockSize, StoreHotCacheUseShm, StoreHotMaxAgeMs,
	PGHostIP, PGInitTimeout, PGCoordinator, PGCoordinatorSecret, PGHangTimeoutMs, PGDirectMax, PGAllReduceAlgo, PGAllGatherAlgo, PGAllToAllAlgo, PGCMA, PGSpinUs, PGYieldUs, PGSlotBytes, PGP2PSlotBytes,
	MetadataServer,
	OffloadFileStoragePath, OffloadBackend, OffloadLocalBufferSize, OffloadTotalKeysLimit, OffloadTotalSizeLimit,
	OffloadHeartbeatInterval, OffloadBufferGCInterval, OffloadBufferGCTTLMs, OffloadEnableEviction,
	OffloadBucketKeysLimit, OffloadBucketSizeLimit, OffloadBucketMaxTotalSize, OffloadBucketEvictionPolicy,

	{Name: "MOONCAKE_LIB", Kind: File, Default: "the installed libmooncake.so",
		ReadBy: "python", Doc: "path of the libmooncake.so the Python package loads"},
	{Name: "MOONCAKE_EP_LOCAL_HOSTNAME", Kind: Text, Default: "local address of the route to MASTER_ADDR, 127.0.0.1 without MASTER_ADDR",
		ReadBy: "python, ep", Doc: "address peers reach an EP Buffer's engine at (loopback or wildcard with a non-loopback MASTER_ADDR is refused)"},
	{Name: "MOONCAKE_PG_AUTO_DEACTIVATE_ON_FAILURE", Kind: Enum, Values: []string{"0", "1"}, Default: "1",
		ReadBy: "torch_plugin", Doc: "0 turns off excluding failed ranks automatically (any other value turns it on)"},
	{Name: "MOONCAKE_PG_AUTO_SYNC_ON_FAILURE", Kind: Enum, Values: []string{"0", "1"}, Default: "1",
		ReadBy: "torch_plugin", Doc: "0 turns off the automatic sync after a failure (any other value turns it on)"},
	{Name: "MC_STORE_USE_HUGEPAGE", Kind: Bool, Default: "false",
		ReadBy: "python", Doc: "store setup: segment and local buffer on huge pages (setup's use_hugepage)"},
	{Name: "MC_STORE_HUGEPAGE_SIZE", Kind: Enum, Values: []string{"2MB", "1GB"}, Default: "2MB",
		ReadBy: "python", Doc: "store setup: huge page size (setup's hugepage_size)"},
	{Name: "MOONCAKE_CONFIG_PATH", Kind: File, Default: "none",
		ReadBy: "python", Doc: "store config file of MooncakeConfig.load_from_env (mooncake_config.py)"},
	{Name: "MOONCAKE_MASTER", Kind: Text, Default: "none (required without MOONCAKE_CONFIG_PATH)",
		ReadBy: "python", Doc: "MooncakeConfig: master_server_address"},
	{Name: "MOONCAKE_LOCAL_HOSTNAME", Kind: Text, Default: "localhost",
		ReadBy: "python", Doc: "MooncakeConfig: local_hostname"},
	{Name: "MOONCAKE_TE_META_DATA_SERVER", Kind: Text, Default: "P2PHANDSHAKE",
		ReadBy: "python", Doc: "MooncakeConfig: metadata_server"},
	{Name: "MOONCAKE_GLOBAL_SEGMENT_SIZE", Kind: Text, Default: "MooncakeConfig's default",
		ReadBy: "python", Doc: "MooncakeConfig: global_segment_size (bytes, or with a unit)"},
	{Name: "MOONCAKE_LOCAL_BUFFER_SIZE", Kind: Text, Default: "MooncakeConfig's default",
		ReadBy: "python", Doc: "MooncakeConfig: local_buffer_size (bytes, or with a unit)"},
	{Name: "MOONCAKE_PROTOCOL", Kind: Text, Default: "tcp",
		ReadBy: "python", Doc: "MooncakeConfig: protocol"},
	{Name: "MOONCAKE_DEVICE", Kind: Text, Default: "none",
		ReadBy: "python", Doc: "MooncakeConfig: device_name"},
	{Name: "MOONCAKE_OFFLOAD_ENABLED", Kind: Text, Default: "false",
		ReadBy: "python", Doc: "MooncakeConfig: enable_ssd_offload (true/yes/on/1, ...)"},
	{Name: "MOONCAKE_TENANT_ID", Kind: Text, Default: "default",
		ReadBy: "python", Doc: "MooncakeConfig: tenant_id"},
	{Name: "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", Kind: Text, Default: "false",
		ReadBy: "python", Doc: "MooncakeConfig: enable_client_http_server (true/yes/on/1, ...)"},
	{Name: "MOONCAKE_CLIENT_HTTP_PORT", Kind: Int, Min: 1, Max: 65535, Default: "9300",
		ReadBy: "python", Doc: "MooncakeConfig: client_http_port"},
	{Name: "MC_USE_TENT", Kind: Text, Default: "unset",
		ReadBy: "python", Doc: "transfer_engine_topology_dump: set means upstream's TENT layout"},
	{Name: "MC_USE_TEV1", Kind: Text, Default: "unset",
		ReadBy: "python", Doc: "transfer_engine_topology_dump: same as MC_USE_TENT"},
	{Name: "MC_CUSTOM_TOPO_JSON", Kind: Text, Default: "none",
		ReadBy: "python", Doc: "transfer_engine_topology_dump: topology file for --use-custom-topo"},
	{Name: "MOONCAKE_WHEELHOUSE", Kind: Text, Default: "~/.cache/mooncake-go/wheels",
		ReadBy: "scripts/setup.sh", Doc: "wheel cache of make setup"},
	{Name: "MOONCAKE_DEMO_MASTER", Kind: Text, Default: "none",
		ReadBy: "demo", Doc: "master the collectives demo checkpoints to"},
	{Name: "MOONCAKE_DEMO_METADATA", Kind: Text, Default: "none",
		ReadBy: "demo", Doc: "metadata server of the collectives demo's checkpoint"},
	{Name: "MOONCAKE_MOONCAKE_MASTER", Kind: File, Default: "the installed mooncake_master",
		ReadBy: "benchmarks", Doc: "mooncake_master binary the store benchmark runs"},
	{Name: "MC_GPU_CHECK_WORK", Kind: Text, Default: "/tmp/mc_gpu_check",
		ReadBy: "scripts/gpu_check.sh", Doc: "scratch folder of the GPU device check"},
	{Name: "MOONCAKE_UPSTREAM_VENV", Kind: Text, Default: "none",
		ReadBy: "benchmarks", Doc: "virtual environment with upstream's mooncake, the master benchmark's upstream column"},

	upstream("MC_YLT_LOG_LEVEL", "yalantinglibs log level"),
	upstream("MC_LOG_DIR", "log directory"),
	upstream("MC_MS_AUTO_DISC", "RDMA topology auto-discovery"),
	upstream("MC_MS_FILTERS", "RDMA devices to use"),
	upstream("MC_TE_FILTERS", "RDMA devices to use"),
	upstream("MC_FORCE_HCA", "force RDMA"),
	upstream("MC_GID_INDEX", "RDMA GID index"),
	upstream("MC_MTU", "RDMA MTU"),
	upstream("MC_IB_PORT", "RDMA port"),
	upstream("MC_ENABLE_DEST_DEVICE_AFFINITY", "fewer RDMA QPs"),
	upstream("MC_RDMA_BIND_ADDRESS", "RDMA bind address"),
	upstream("MC_SLICE_SIZE", "RDMA slice size"),
	upstream("MC_RETRY_CNT", "RDMA retries"),
	upstream("MC_NUM_QP_PER_EP", "RDMA QPs per endpoint"),
	upstream("MC_MAX_EP_PER_CTX", "RDMA endpoints per context"),
	upstream("MC_WORKERS_PER_CTX", "RDMA workers per context"),
	upstream("MC_ENDPOINT_STORE_TYPE", "RDMA endpoint cache"),
	upstream("MC_LEGACY_RPC_PORT_BINDING", "legacy handshake port binding"),
	upstream("MC_TE_METRIC", "engine metrics"),
	upstream("MC_TE_METRIC_INTERVAL_SECONDS", "engine metrics interval"),
	upstream("MC_DISABLE_METACACHE", "descriptor cache"),
	upstream("MC_TE_METADATA_REFRESH_INTERVAL_SECONDS", "descriptor refresh"),
	upstream("MC_HANDSHAKE_CONNECT_TIMEOUT", "handshake connect timeout"),
	upstream("MC_TCP_ENABLE_CONNECTION_POOL", "TCP connection pool (always on here)"),
	upstream("MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER", "TCP admission queue"),
	upstream("MC_TCP_ADMISSION_TIMEOUT_MS", "TCP admission timeout"),
	upstream("MC_TCP_PROTO", "TCP wire version (v2 here)"),
	upstream("MC_TCP_SLICE_SIZE", "TCP slice size"),
	upstream("MC_TCP_STATUS_TIMEOUT_SEC", "TCP status frame timeout"),
	upstream("MC_STORE_MEMCPY", "local memcpy path"),
	upstream("MC_STORE_CLIENT_METRIC", "client metrics"),
	upstream("MC_STORE_CLIENT_METRIC_INTERVAL", "client metrics interval"),
	upstream("MC_STORE_LOCAL_HOT_ADMISSION_THRESHOLD", "hot cache admission (every read fills here)"),
	upstream("MC_MMAP_ARENA_POOL_SIZE", "mmap arena pool"),
	upstream("MC_RPC_CONNECT_TIMEOUT_MS", "master connect timeout"),
	upstream("MC_RPC_PROTOCOL", "master RPC protocol"),
	upstream("MOONCAKE_HOST_ID", "placement host id"),
	upstream("MOONCAKE_OFFLOAD_SCANMETA_ITERATOR_KEYS_LIMIT", "disk tier metadata scan batch"),
	upstream("MOONCAKE_SCANMETA_ITERATOR_KEYS_LIMIT", "legacy name of the disk tier metadata scan batch"),
	upstream("MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION", "disk tier watermark eviction (the limits evict here)"),
	upstream("MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO", "disk tier eviction high watermark"),
	upstream("MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO", "disk tier eviction low watermark"),
	upstream("MOONCAKE_OFFLOAD_USE_URING", "io_uring disk I/O"),
	upstream("MOONCAKE_OFFLOAD_BUCKET_MAX_PHYSICAL_BYTES", "bucket file system usage limit"),
	upstream("MOONCAKE_OFFLOAD_BUCKET_DISK_SCAN_CACHE_MS", "bucket disk usage cache"),
	upstream("MOONCAKE_OFFLOAD_FSDIR", "file-per-key backend directory"),
	upstream("MC_STORE_PINNED_RESTORE_ARENA_SIZE_BYTES", "pinned restore arena"),
}

func upstream(name, doc string) *Var {
	return &Var{Name: name, Kind: Text, Default: "not read", Doc: "upstream: " + doc}
}
