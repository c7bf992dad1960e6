package main

import (
	"flag"
	"fmt"
	"sort"
	"strings"
)

// snapshotFlags are upstream's metadata snapshot flags. Snapshots are not
// implemented (docs/store-master.md, "HA"): each flag is declared so that
// a launch script passing one fails with a clear message instead of
// "flag provided but not defined", and none is silently accepted.
var snapshotFlags = []string{
	"enable_snapshot", "snapshot_interval_seconds", "snapshot_retention_count",
	"snapshot_object_store_type", "enable_snapshot_restore",
}

// declareSnapshotFlags declares the snapshot flags as strings; their
// values are never used.
func declareSnapshotFlags(fs *flag.FlagSet) {
	for _, name := range snapshotFlags {
		fs.Var(&boolOrString{}, name, "not implemented: metadata snapshots (giving it fails startup); with --enable_oplog the whole log is replayed instead")
	}
}

// boolOrString takes any value, and no value as a boolean flag does.
type boolOrString struct{ v string }

func (b *boolOrString) String() string     { return b.v }
func (b *boolOrString) Set(v string) error { b.v = v; return nil }
func (b *boolOrString) IsBoolFlag() bool   { return true }

// checkSnapshotFlags fails when any snapshot flag was given.
func checkSnapshotFlags(set map[string]bool) error {
	var given []string
	for _, name := range snapshotFlags {
		if set[name] {
			given = append(given, "--"+name)
		}
	}
	if len(given) == 0 {
		return nil
	}
	sort.Strings(given)
	return fmt.Errorf("%s: metadata snapshots are not implemented by this master (no local or s3 snapshot store); "+
		"with --enable_oplog a standby or restarted master replays the whole operation log from etcd instead",
		strings.Join(given, ", "))
}
