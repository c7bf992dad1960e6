package main

import (
	"flag"
	"fmt"
)

// offloadFlags are the disk tier's flags (upstream names and defaults);
// they fill o.cfg.Offload.
type offloadFlags struct {
	rootFsDir string
}

// declareOffloadFlags declares the disk tier's flags into fs.
func declareOffloadFlags(fs *flag.FlagSet, o *options) {
	c := &o.cfg.Offload
	fs.BoolVar(&c.Enable, "enable_offload", false, "keep a disk tier: storage clients with enable_ssd_offload mount local disks, and the master records LOCAL_DISK replicas")
	fs.BoolVar(&c.OnEvict, "offload_on_evict", false, "offload an object when eviction selects it (instead of at every put)")
	fs.BoolVar(&c.ForceEvict, "offload_force_evict", false, "with --offload_on_evict, evict objects whose offload could not be queued without a disk copy")
	fs.IntVar(&c.QueueLimit, "offloading_queue_limit", c.QueueLimit, "most offloads queued or in flight, in [1, 100000000]")
	fs.Var(ratio{&c.CapRatio}, "offload_cap_ratio", "fraction of --offloading_queue_limit one eviction run may queue, in [0,1]")
	fs.BoolVar(&c.PromotionOnHit, "promotion_on_hit", false, "copy a disk-only object back into memory after --promotion_admission_threshold reads")
	fs.IntVar(&c.PromotionAdmissionThreshold, "promotion_admission_threshold", c.PromotionAdmissionThreshold, "disk reads that admit a promotion (clamped to [1,255])")
	fs.IntVar(&c.PromotionQueueLimit, "promotion_queue_limit", c.PromotionQueueLimit, "most promotions queued or in flight")
	fs.IntVar(&c.PromotionMaxPerHeartbeat, "promotion_max_per_heartbeat", c.PromotionMaxPerHeartbeat, "promotions one offload heartbeat hands a storage client (at least 1)")
	fs.StringVar(&o.offload.rootFsDir, "root_fs_dir", "", "upstream's shared-file-system DISK replicas: not implemented (any value is refused); use --enable_offload")
}

// checkOffloadFlags refuses what the disk tier does not implement.
func checkOffloadFlags(o *options) error {
	if o.offload.rootFsDir != "" {
		return fmt.Errorf("--root_fs_dir=%s: shared-file-system DISK replicas are not implemented; the disk tier is --enable_offload (storage clients' local disks, see docs/store-master.md)", o.offload.rootFsDir)
	}
	return nil
}
