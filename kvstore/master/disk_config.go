package master

import "fmt"

// OffloadConfig holds the disk tier's settings (client-local SSD offload,
// upstream's LOCAL_DISK replicas). Everything but Enable is inert while
// Enable is false.
type OffloadConfig struct {
	// Enable lets storage clients mount local disks and keeps LOCAL_DISK
	// replicas (--enable_offload, false).
	Enable bool
	// OnEvict offloads an object when eviction selects it instead of when
	// it is written (--offload_on_evict, false).
	OnEvict bool
	// ForceEvict lets eviction drop, without a disk copy, objects whose
	// offload could not be queued (--offload_force_evict, false).
	ForceEvict bool
	// QueueLimit bounds the offload tasks waiting or in flight
	// (--offloading_queue_limit, 50000, in [1, 1e8]).
	QueueLimit int
	// CapRatio × QueueLimit is how many offloads one eviction run may
	// queue (--offload_cap_ratio, 0.5).
	CapRatio float64
	// PromotionOnHit copies a disk-only object back into memory after
	// PromotionAdmissionThreshold reads (--promotion_on_hit, false).
	PromotionOnHit bool
	// PromotionAdmissionThreshold is the read count that admits a
	// promotion (--promotion_admission_threshold, 2, clamped to [1,255]).
	PromotionAdmissionThreshold int
	// PromotionQueueLimit bounds the promotions waiting or in flight
	// (--promotion_queue_limit, 50000).
	PromotionQueueLimit int
	// PromotionMaxPerHeartbeat is how many promotions one offload
	// heartbeat hands a client (--promotion_max_per_heartbeat, 1, ≥1).
	PromotionMaxPerHeartbeat int
}

// DefaultOffloadConfig returns upstream's defaults (offload off).
func DefaultOffloadConfig() OffloadConfig {
	return OffloadConfig{
		QueueLimit: 50000, CapRatio: 0.5, PromotionAdmissionThreshold: 2,
		PromotionQueueLimit: 50000, PromotionMaxPerHeartbeat: 1,
	}
}

// validate reports the first setting out of range.
func (c OffloadConfig) validate() error {
	switch {
	case c.QueueLimit < 1 || c.QueueLimit > 100_000_000:
		return fmt.Errorf("offloading_queue_limit %d not in [1, 100000000]", c.QueueLimit)
	case c.CapRatio < 0 || c.CapRatio > 1:
		return fmt.Errorf("offload_cap_ratio %v not in [0,1]", c.CapRatio)
	case c.PromotionQueueLimit < 1:
		return fmt.Errorf("promotion_queue_limit %d must be at least 1", c.PromotionQueueLimit)
	case c.PromotionMaxPerHeartbeat < 1:
		return fmt.Errorf("promotion_max_per_heartbeat %d must be at least 1", c.PromotionMaxPerHeartbeat)
	}
	return nil
}

// threshold is the admission threshold clamped to [1,255], as upstream.
func (c OffloadConfig) threshold() int { return min(max(c.PromotionAdmissionThreshold, 1), 255) }

// evictCap is how many offloads one eviction run may queue.
func (c OffloadConfig) evictCap() int { return int(float64(c.QueueLimit) * c.CapRatio) }
