package main

import (
	"flag"
	"fmt"
	"path/filepath"
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
	backupDir string
	timeout   int
	// Deprecated aliases, each after the flag it stands for: of
	// storeType, of catalogType, of catalogConn.
	payloadStoreType, payloadBackendType string
	catalogType, catalogBackendType      string
	catalogConn, catalogBackendConn      string
}

// declareSnapshotFlags declares the snapshot flags into o.
func declareSnapshotFlags(fs *flag.FlagSet, o *snapshotOptions) {
	fs.BoolVar(&o.enable, "enable_snapshot", false, "with --enable_oplog: the leader periodically writes the whole metadata to the snapshot store and compacts the oplog behind it")
	fs.IntVar(&o.interval, "snapshot_interval_seconds", int(replication.DefaultSnapshotInterval/time.Second), "seconds between metadata snapshots")
	fs.IntVar(&o.retention, "snapshot_retention_count", replication.DefaultSnapshotRetention, "snapshots kept; the oplog is compacted behind the oldest one kept")
	fs.StringVar(&o.storeType, "snapshot_object_store_type", "", "snapshot store: local (empty means local: the directory MOONCAKE_SNAPSHOT_LOCAL_PATH); s3 is not supported")
	fs.BoolVar(&o.restore, "enable_snapshot_restore", false, "a standby or restarted master starts from the newest snapshot and applies the oplog after it")
	fs.StringVar(&o.backupDir, "snapshot_backup_dir", "", "second local directory every snapshot is also written to; a restore that finds no usable snapshot in the store tries it (empty: no backup)")
	fs.IntVar(&o.timeout, "snapshot_child_timeout_seconds", int(replication.DefaultSnapshotTimeout/time.Second), "seconds one snapshot may take, from taking it to recording it in etcd; a slower one is abandoned")
	fs.StringVar(&o.payloadStoreType, "snapshot_payload_store_type", "", "deprecated alias of --snapshot_object_store_type")
	fs.StringVar(&o.payloadBackendType, "snapshot_payload_backend_type", "", "deprecated alias of --snapshot_object_store_type")
	fs.StringVar(&o.catalogType, "snapshot_catalog_store_type", "", "where the list of snapshots lives: empty or embedded (with the snapshots, in the local store; payload is a deprecated alias); redis is not supported")
	fs.StringVar(&o.catalogBackendType, "snapshot_catalog_backend_type", "", "deprecated alias of --snapshot_catalog_store_type")
	fs.StringVar(&o.catalogConn, "snapshot_catalog_store_connstring", "", "connection string of a redis snapshot catalog; only empty is supported")
	fs.StringVar(&o.catalogBackendConn, "snapshot_catalog_backend_connstring", "", "deprecated alias of --snapshot_catalog_store_connstring")
}

// firstSet is the first non-empty value of vs.
func firstSet(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// config checks the flags and returns the snapshot configuration, nil
// when neither snapshots nor restore is on.
func (o *snapshotOptions) config(enableOplog bool) (*replication.SnapshotConfig, error) {
	o.storeType = firstSet(o.storeType, o.payloadStoreType, o.payloadBackendType)
	switch catalog := firstSet(o.catalogType, o.catalogBackendType); catalog {
	case "", "embedded", "payload":
	case "redis":
		return nil, fmt.Errorf("--snapshot_catalog_store_type=redis is not supported: this master keeps the snapshot list with the snapshots in the local store and records the newest in etcd (use embedded)")
	default:
		return nil, fmt.Errorf("--snapshot_catalog_store_type=%s: want embedded or redis (only embedded is supported)", catalog)
	}
	if conn := firstSet(o.catalogConn, o.catalogBackendConn); conn != "" {
		return nil, fmt.Errorf("--snapshot_catalog_store_connstring=%s is not supported: it locates a redis snapshot catalog, and the catalog here is embedded", conn)
	}
	if o.backupDir != "" && !filepath.IsAbs(o.backupDir) {
		return nil, fmt.Errorf("--snapshot_backup_dir=%s: want an absolute path", o.backupDir)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("--snapshot_child_timeout_seconds=%d: want a positive number", o.timeout)
	}
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
		if o.backupDir != "" {
			return nil, fmt.Errorf("--snapshot_backup_dir needs --enable_snapshot or --enable_snapshot_restore")
		}
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
		Restore: o.restore, Dir: dir, BackupDir: o.backupDir, Timeout: time.Duration(o.timeout) * time.Second,
	}, nil
}
