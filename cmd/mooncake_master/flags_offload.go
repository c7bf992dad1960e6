package main

import (
	"flag"
	"fmt"
	"path/filepath"
)

// declareOffloadFlags declares the disk tiers' flags into fs (upstream
// names and defaults): the client-local SSD offload (o.cfg.Offload) and
// the shared-file-system DISK replicas (o.cfg.FS).
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
	f := &o.cfg.FS
	fs.StringVar(&f.RootDir, "root_fs_dir", "", "shared-file-system DISK replicas: every put also writes the object to a file under <dir>/<cluster_id>, which every client must reach at this absolute path (3FS, NFS); reads fall back to it once memory is evicted")
	fs.Int64Var(&f.GlobalFileSegmentSize, "global_file_segment_size", f.GlobalFileSegmentSize, "capacity reported for --root_fs_dir in bytes (metrics only)")
}

// checkOffloadFlags checks the disk tiers' flags and gives the DISK
// replicas the cluster id.
func checkOffloadFlags(o *options) error {
	f := &o.cfg.FS
	f.ClusterID = o.clusterID
	if f.RootDir != "" && !filepath.IsAbs(f.RootDir) {
		return fmt.Errorf("--root_fs_dir=%s: want an absolute path (every client opens the files under it)", f.RootDir)
	}
	if f.GlobalFileSegmentSize <= 0 {
		return fmt.Errorf("--global_file_segment_size=%d: want a positive number of bytes", f.GlobalFileSegmentSize)
	}
	return nil
}
