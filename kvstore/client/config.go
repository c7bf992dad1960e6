package client

import (
	"time"

	"github.com/mooncake-go/mooncake/internal/envvars"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
	"github.com/mooncake-go/mooncake/transfer"
)

// Config is what setup takes (upstream MooncakeDistributedStore.setup).
type Config struct {
	// LocalHostname is "host" or "host:port"; without a port the client
	// picks a free one in [MC_STORE_CLIENT_MIN_PORT, MC_STORE_CLIENT_MAX_PORT]
	// (12300-14300) and the effective name becomes host:port.
	LocalHostname string
	// MetadataServer is the Transfer Engine metadata connection string.
	MetadataServer string
	// GlobalSegmentSize bytes are contributed to the pool (0: pure client).
	GlobalSegmentSize uint64
	// LocalBufferSize bytes stage copying puts and gets (0: zero-copy only).
	LocalBufferSize uint64
	Protocol        string
	DeviceName      string
	// MasterServerAddr is "host:port", or "etcd://h1:p1;h2:p2" or
	// "redis://host:port" to follow the elected leader of an HA cluster.
	MasterServerAddr string
	// Engine, when set, is shared instead of starting a new one; the
	// client does not close it.
	Engine *transfer.Engine
	// HugePageSize puts the local buffer and the segment on huge pages of
	// that size (2 MiB or 1 GiB; 0: normal pages). The kernel must have
	// enough reserved, or New fails saying how many are missing.
	HugePageSize uint64
	// TenantID is sent with every request to the master ("" and
	// "default" are the default tenant). Only a master started with
	// --enable_multi_tenants isolates tenants.
	TenantID string
	// Fleet holds the Store-RS options: namespace, routed writes,
	// eviction watermarks (fleet_config.go).
	Fleet FleetConfig
}

// ReplicateConfig is how an object is placed (upstream ReplicateConfig).
type ReplicateConfig struct {
	ReplicaNum            int      `json:"replica_num"`
	SoftPinAction         int      `json:"soft_pin_action"`
	SoftPinTTLMs          *int64   `json:"soft_pin_ttl_ms"`
	WithHardPin           bool     `json:"with_hard_pin"`
	PreferredSegments     []string `json:"preferred_segments"`
	PreferredSegment      string   `json:"preferred_segment"`
	PreferAllocInSameNode bool     `json:"prefer_alloc_in_same_node"`
	// DataType is upstream's ObjectDataType, kept with the object.
	DataType int `json:"data_type"`
	// GroupIDs name each key's storage group ("" for none); nil means
	// none, otherwise a batch needs one per key.
	GroupIDs []string `json:"group_ids"`
	// PreferLocal places the first replica on this client's own segments;
	// PreferredStorageOwners (or the single PreferredStorageOwner) are
	// store clients, by hostname (host:port), tried next.
	PreferLocal            bool     `json:"prefer_local"`
	PreferredStorageOwners []string `json:"preferred_storage_owners"`
	PreferredStorageOwner  string   `json:"preferred_storage_owner"`
}

// DefaultReplicateConfig is one replica, no pins.
func DefaultReplicateConfig() ReplicateConfig { return ReplicateConfig{ReplicaNum: 1} }

func (c ReplicateConfig) proto(hostID string) *pb.ReplicateConfig {
	segs := c.PreferredSegments
	if c.PreferredSegment != "" {
		segs = []string{c.PreferredSegment}
	}
	owners := c.PreferredStorageOwners
	if c.PreferredStorageOwner != "" {
		owners = append([]string{c.PreferredStorageOwner}, owners...)
	}
	return &pb.ReplicateConfig{
		ReplicaNum:            uint32(max(c.ReplicaNum, 0)),
		SoftPinAction:         pb.SoftPinAction(c.SoftPinAction),
		SoftPinTtlMs:          c.SoftPinTTLMs,
		WithHardPin:           c.WithHardPin,
		PreferredSegments:     segs,
		PreferAllocInSameNode: c.PreferAllocInSameNode,
		HostId:                hostID,
		DataType:              uint32(max(c.DataType, 0)),
		PreferLocal:           c.PreferLocal,
		PreferredOwners:       owners,
	}
}

// groupID is key i's storage group.
func (c ReplicateConfig) groupID(i int) string {
	if i < len(c.GroupIDs) {
		return c.GroupIDs[i]
	}
	return ""
}

// rpcTimeout bounds one master RPC (MC_RPC_TIMEOUT_MS, default 10 s).
func rpcTimeout() time.Duration {
	return time.Duration(envvars.RPCTimeoutMs.Int(10000)) * time.Millisecond
}

// checksumEnabled reports MOONCAKE_STORE_CHECKSUM=1 (or true/yes/on).
func checksumEnabled() bool {
	return envvars.StoreChecksum.Enabled()
}
