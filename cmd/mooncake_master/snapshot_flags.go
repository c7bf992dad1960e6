package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// snapshotOptions are upstream's metadata snapshot flags
// (docs/store-ha.md, "Snapshots").
type snapshotOptions struct {
	enable    bool
	interval  int
	retention int
	storeType string
	restore   bool
}

// declareSnapshotFlags declares the snapshot flags into o.
func declareSnapshotFlags(fs *flag.FlagSet, o *snapshotOptions) {
	fs.BoolVar(&o.enable, "enable_snapshot", false, "with --enable_oplog: the leader periodically writes the whole metadata to the snapshot store and compacts the oplog behind it")
	fs.IntVar(&o.interval, "snapshot_interval_seconds", int(replication.DefaultSnapshotInterval/time.Second), "seconds between metadata snapshots")
	fs.IntVar(&o.retention, "snapshot_retention_count", replication.DefaultSnapshotRetention, "snapshots kept; the oplog is compacted behind the oldest one kept")
	fs.StringVar(&o.storeType, "snapshot_object_store_type", "", "snapshot store: local (empty means local: the directory MOONCAKE_SNAPSHOT_LOCAL_PATH); s3 is not supported")
	fs.BoolVar(&o.restore, "enable_snapshot_restore", false, "a standby or restarted master starts from the newest snapshot and applies the oplog after it")
}

// config checks the flags and returns the snapshot configuration, nil
// when neither snapshots nor restore is on.
func (o *snapshotOptions) config(enableOplog bool) (*replication.SnapshotConfig, error) {
	switch o.storeType {
	case "", "local":
	case "s3":
		return nil, fmt.Errorf("--snapshot_object_store_type=s3 is not supported by this master (no object store client); use local with MOONCAKE_SNAPSHOT_LOCAL_PATH")
	default:
		return nil, fmt.Errorf("--snapshot_object_store_type=%s is not supported (only local)", o.storeType)
	}
	if o.interval <= 0 || o.retention <= 0 {
		return nil, fmt.Errorf("--snapshot_interval_seconds and --snapshot_retention_count must be positive")
	}
	if !o.enable && !o.restore {
		return nil, nil
	}
	if !enableOplog {
		return nil, fmt.Errorf("--enable_snapshot and --enable_snapshot_restore need --enable_oplog (a snapshot is a point of the operation log)")
	}
	dir := envvars.SnapshotLocalPath.Value()
	if dir == "" {
		return nil, fmt.Errorf("--snapshot_object_store_type=local needs MOONCAKE_SNAPSHOT_LOCAL_PATH, the directory of the snapshot store")
	}
	return &replication.SnapshotConfig{
		Enable: o.enable, Interval: time.Duration(o.interval) * time.Second, Retention: o.retention,
		Restore: o.restore, Dir: dir,
	}, nil
}
