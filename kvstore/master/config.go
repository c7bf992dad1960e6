package master

import (
	"fmt"
	"time"
)

// Config holds the tunables of the object table. Start from DefaultConfig:
// the zero value is not the upstream default (a zero ratio or TTL is a
// meaningful setting).
type Config struct {
	// DefaultLeaseTTL is the read lease granted by GetReplicaList and
	// ExistKey (--default_kv_lease_ttl, 10 s).
	DefaultLeaseTTL time.Duration
	// DefaultSoftPinTTL applies when a put enables soft pin without a TTL
	// (--default_kv_soft_pin_ttl, 30 min).
	DefaultSoftPinTTL time.Duration
	// MaxSoftPinTTL bounds a requested soft pin TTL (--max_kv_soft_pin_ttl,
	// 24 h); a larger one is INVALID_PARAMS.
	MaxSoftPinTTL time.Duration
	// AllowEvictSoftPinned lets eviction's second pass take soft-pinned
	// objects (--allow_evict_soft_pinned_objects, true).
	AllowEvictSoftPinned bool
	// EvictionRatio is the fraction of objects one eviction run aims to
	// free (--eviction_ratio, 0.05).
	EvictionRatio float64
	// EvictionHighWatermarkRatio is the used/capacity ratio above which
	// eviction runs (--eviction_high_watermark_ratio, 0.90).
	EvictionHighWatermarkRatio float64
	// ClientTTL is how long a client may stay silent (no ping, mount or
	// remount) before it becomes suspect: its segments take no new
	// replicas, but keep those they hold (--client_ttl, 10 s).
	ClientTTL time.Duration
	// ClientDeadTTL is how long a client may stay silent before it is
	// forgotten: its segments are unmounted and the replicas on them
	// dropped (--client_dead_ttl, 300 s). A value below ClientTTL counts
	// as ClientTTL: a silent client is then forgotten at once, without a
	// suspect phase.
	ClientDeadTTL time.Duration
	// PutStartDiscardTimeout is the age after which a pending write may be
	// preempted by another PutStart (--put_start_discard_timeout_sec, 30 s).
	PutStartDiscardTimeout time.Duration
	// PutStartReleaseTimeout is how long the buffers of a preempted write
	// stay quarantined before they are reused, and the age after which a
	// write that never finished is discarded
	// (--put_start_release_timeout_sec, 600 s).
	PutStartReleaseTimeout time.Duration
	// MultiTenant isolates tenants (--enable_multi_tenants, false): each
	// request works in its tenant's key namespace, and writes need the
	// tenant registered with a quota (SetTenantQuota). Off, every tenant
	// id maps to DefaultTenant and all clients share one namespace.
	MultiTenant bool
	// Seed seeds the random start segment of the allocation strategy and
	// the task ids' draws (whose low half is also salted per incarnation,
	// apart from Seed; the first reservation id is drawn apart too).
	Seed int64
	// Offload configures the disk tier (see OffloadConfig).
	Offload OffloadConfig
	// FS configures the DISK replicas on a shared file system (FSConfig).
	FS FSConfig
	// Tasks bound the copy and move task queue (TaskLimits).
	Tasks TaskLimits
	// DynamicReplication fans hot keys out to more memory replicas
	// (DynamicReplicationConfig; off by default).
	DynamicReplication DynamicReplicationConfig
	// KVEvents, when set, receives the KV cache events (--enable_kv_events;
	// kv_events.go).
	KVEvents KVEventSink
}

// DefaultConfig returns upstream's defaults.
func DefaultConfig() Config {
	return Config{
		DefaultLeaseTTL:            10 * time.Second,
		DefaultSoftPinTTL:          30 * time.Minute,
		MaxSoftPinTTL:              24 * time.Hour,
		AllowEvictSoftPinned:       true,
		EvictionRatio:              0.05,
		EvictionHighWatermarkRatio: 0.90,
		ClientTTL:                  10 * time.Second,
		ClientDeadTTL:              300 * time.Second,
		PutStartDiscardTimeout:     30 * time.Second,
		PutStartReleaseTimeout:     600 * time.Second,
		Offload:                    DefaultOffloadConfig(),
		FS:                         DefaultFSConfig(),
		Tasks:                      DefaultTaskLimits(),
		DynamicReplication:         DefaultDynamicReplicationConfig(),
	}
}

// deadTTL is the silence after which a client is forgotten: ClientDeadTTL,
// at least ClientTTL.
func (c Config) deadTTL() time.Duration { return max(c.ClientDeadTTL, c.ClientTTL) }

// Validate reports the first setting out of range.
func (c Config) Validate() error {
	switch {
	case c.EvictionRatio < 0 || c.EvictionRatio > 1:
		return fmt.Errorf("eviction_ratio %v not in [0,1]", c.EvictionRatio)
	case c.EvictionHighWatermarkRatio < 0 || c.EvictionHighWatermarkRatio > 1:
		return fmt.Errorf("eviction_high_watermark_ratio %v not in [0,1]", c.EvictionHighWatermarkRatio)
	case c.DefaultLeaseTTL < 0:
		return fmt.Errorf("default_kv_lease_ttl %v is negative", c.DefaultLeaseTTL)
	case c.DefaultSoftPinTTL < 0 || c.MaxSoftPinTTL < 0:
		return fmt.Errorf("soft pin TTLs must not be negative")
	case c.DefaultSoftPinTTL > c.MaxSoftPinTTL:
		return fmt.Errorf("default_kv_soft_pin_ttl %v exceeds max_kv_soft_pin_ttl %v", c.DefaultSoftPinTTL, c.MaxSoftPinTTL)
	case c.ClientTTL <= 0:
		return fmt.Errorf("client_ttl %v must be positive", c.ClientTTL)
	case c.ClientDeadTTL < 0:
		return fmt.Errorf("client_dead_ttl %v is negative", c.ClientDeadTTL)
	case c.PutStartDiscardTimeout < 0 || c.PutStartReleaseTimeout < 0:
		return fmt.Errorf("put_start timeouts must not be negative")
	}
	if err := c.Tasks.validate(); err != nil {
		return err
	}
	if err := c.DynamicReplication.validate(); err != nil {
		return err
	}
	return c.Offload.validate()
}
