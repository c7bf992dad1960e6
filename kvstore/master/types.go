package master

import "time"

// SoftPinAction says what a write does to an object's soft pin, as
// upstream's ReplicateConfig.soft_pin_action.
type SoftPinAction int

// Soft pin actions, numbered as upstream.
const (
	SoftPinPreserve SoftPinAction = 0
	SoftPinEnable   SoftPinAction = 1
	SoftPinDisable  SoftPinAction = 2
)

// ReplicaStatus is a replica's place in its lifecycle, numbered as
// upstream. Only Processing and Complete are used by memory replicas.
type ReplicaStatus int

// Replica statuses.
const (
	ReplicaUndefined   ReplicaStatus = 0
	ReplicaInitialized ReplicaStatus = 1
	ReplicaProcessing  ReplicaStatus = 2
	ReplicaComplete    ReplicaStatus = 3
	ReplicaRemoved     ReplicaStatus = 4
	ReplicaFailed      ReplicaStatus = 5
)

// String returns the upstream name of the status (COMPLETE, ...).
func (s ReplicaStatus) String() string {
	switch s {
	case ReplicaInitialized:
		return "INITIALIZED"
	case ReplicaProcessing:
		return "PROCESSING"
	case ReplicaComplete:
		return "COMPLETE"
	case ReplicaRemoved:
		return "REMOVED"
	case ReplicaFailed:
		return "FAILED"
	}
	return "UNDEFINED"
}

// ReplicateConfig is how a write wants its object placed and protected.
type ReplicateConfig struct {
	// ReplicaNum is the number of memory replicas wanted (best effort, ≥1
	// must succeed). 0 is INVALID_PARAMS.
	ReplicaNum int
	// SoftPin and SoftPinTTL: ENABLE with a nil TTL uses the default; a
	// TTL with PRESERVE or DISABLE is INVALID_PARAMS; a zero TTL with
	// ENABLE means no pin.
	SoftPin    SoftPinAction
	SoftPinTTL *time.Duration
	// HardPin objects are never evicted.
	HardPin bool
	// PreferredSegments are segment names (or ids) tried first, in order.
	PreferredSegments []string
	// PreferSameNode tries segments whose host id is HostID first.
	PreferSameNode bool
	HostID         string
	// DataType (upstream ObjectDataType) and GroupID are kept with the
	// object as metadata; they do not change placement.
	DataType int
	GroupID  string
	// Placement for fleets (docs/store-operations.md): PreferLocal tries
	// the writing client's own segments; PreferredOwners are
	// storage owners (segment names, host:port) tried after
	// PreferredSegments; RouteTopK > 0 routes the write to the RouteTopK
	// open segments with the most free space instead of the random walk.
	PreferLocal     bool
	PreferredOwners []string
	RouteTopK       int
}

// Segment is memory a client contributes: Size bytes at Base inside the
// Transfer Engine segment TEEndpoint.
type Segment struct {
	ID         string
	Name       string
	Base       uint64
	Size       uint64
	TEEndpoint string
	Protocol   string
	HostID     string
	// HighWatermark and LowWatermark are the owner's eviction watermarks,
	// percent of Size (0: none; segment_eviction.go).
	HighWatermark, LowWatermark int
	// Incarnation identifies the memory behind the segment: a random
	// nonzero number its client process drew when it started, 0 when the
	// client does not tell (segments.go, "Suspect clients").
	Incarnation uint64
}

// Replica describes one replica as returned to clients: Size bytes at the
// absolute address Address inside Transfer Engine segment Endpoint.
type Replica struct {
	// Type is ReplicaMemory, or ReplicaLocalDisk for a copy on the disk
	// of client DiskClient, who serves it at Endpoint under DiskKey.
	Type        ReplicaType
	DiskClient  string
	DiskKey     string
	ID          uint64
	Status      ReplicaStatus
	SegmentID   string
	SegmentName string
	Endpoint    string
	Address     uint64
	Size        uint64
	// FilePath is a ReplicaDisk's file, relative to the shared
	// directory (FSConfig.Dir).
	FilePath string
}

// ReadResult is what GetReplicaList returns on success.
type ReadResult struct {
	Replicas []Replica
	LeaseTTL time.Duration
	Checksum *uint64
}

// ClientStatus is the answer to a Ping, numbered as the proto enum.
type ClientStatus int

// Client statuses.
const (
	ClientUndefined   ClientStatus = 0
	ClientOK          ClientStatus = 1
	ClientNeedRemount ClientStatus = 2
)

// ExpiredSegment names a segment unmounted because its client expired.
type ExpiredSegment struct {
	ClientID string
	Segment  Segment
}

// ClientExpiry is what one ExpireClients pass changed.
type ClientExpiry struct {
	// Suspected are the clients that became suspect, sorted.
	Suspected []string
	// Dead are the clients forgotten, sorted.
	Dead []string
	// Expired are the segments unmounted with the dead clients, sorted by
	// client.
	Expired []ExpiredSegment
}
