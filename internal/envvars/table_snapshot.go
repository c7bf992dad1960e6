package envvars

// SnapshotLocalPath is the master's local snapshot store
// (--snapshot_object_store_type=local; docs/store-ha.md, "Snapshots").
var SnapshotLocalPath = &Var{Name: "MOONCAKE_SNAPSHOT_LOCAL_PATH", Kind: Text, Default: "none",
	ReadBy: "mooncake_master", Doc: "directory of the local metadata snapshot store; snapshots go to <path>/<cluster_id>/ (needed with --enable_snapshot or --enable_snapshot_restore)"}

func init() { All = append(All, SnapshotLocalPath) }
