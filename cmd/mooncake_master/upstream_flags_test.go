package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore/master"
)

// TestUpstreamFlagsThisBuildCannotHonourAreRefused: a non-default value
// of an upstream flag this master cannot honour stops the start with a
// usage error that names the flag.
func TestUpstreamFlagsThisBuildCannotHonourAreRefused(t *testing.T) {
	t.Setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", "/snapshots")
	snap := []string{"--enable_ha", "--etcd_endpoints=x:1", "--enable_oplog", "--enable_snapshot"}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--enable_ha", "--ha_backend_connstring=redis://127.0.0.1:6379", "--ha_backend_type=redis", "--enable_oplog"}, "--enable_oplog with --ha_backend_type=redis is not implemented"},
		{[]string{"--ha_backend_type=k8s"}, "--ha_backend_type=k8s"},
		{[]string{"--ha_backend_type=zk"}, "--ha_backend_type=zk"},
		{[]string{"--pod_name=master-0"}, "--pod_name"},
		{[]string{"--pod_namespace=store"}, "--pod_namespace"},
		{[]string{"--dynamic_replication_mode=on"}, "--dynamic_replication_mode=on"},
		{[]string{"--dynamic_replication_heat_window_seconds=0"}, "--dynamic_replication_heat_window_seconds=0"},
		{[]string{"--dynamic_replication_admission_qps_threshold=0"}, "--dynamic_replication_admission_qps_threshold=0"},
		{[]string{"--dynamic_replication_max_memory_replicas=0"}, "--dynamic_replication_max_memory_replicas=0"},
		{[]string{"--tenant_quota_connector_type=etcd"}, "--tenant_quota_connector_type=etcd"},
		{[]string{"--tenant_quota_connector_type=zk"}, "--tenant_quota_connector_type=zk"},
		{[]string{"--tenant_quota_connector_uri=/etc/quotas.yaml"}, "--tenant_quota_connector_uri"}, // single tenant
		{[]string{"--enable_multi_tenants", "--tenant_quota_connector_uri=quotas.yaml"}, "--tenant_quota_connector_uri"},
		{[]string{"--enable_multi_tenants", "--enable_ha", "--etcd_endpoints=x:1", "--tenant_quota_connector_uri=/q.yaml"}, "--tenant_quota_connector_uri"},
		{[]string{"--enable_disk_eviction=false"}, "--enable_disk_eviction=false"},
		{append(snap, "--snapshot_catalog_store_type=redis"), "--snapshot_catalog_store_type=redis"},
		{append(snap, "--snapshot_catalog_backend_type=redis"), "--snapshot_catalog_store_type=redis"},
		{append(snap, "--snapshot_catalog_store_type=zk"), "--snapshot_catalog_store_type=zk"},
		{append(snap, "--snapshot_catalog_store_connstring=redis://h:6379"), "--snapshot_catalog_store_connstring"},
		{append(snap, "--snapshot_catalog_backend_connstring=redis://h:6379"), "--snapshot_catalog_store_connstring"},
		{append(snap, "--snapshot_payload_store_type=s3"), "--snapshot_object_store_type=s3"},
		{append(snap, "--snapshot_payload_backend_type=s3"), "--snapshot_object_store_type=s3"},
		{append(snap, "--snapshot_backup_dir=relative"), "--snapshot_backup_dir"},
		{[]string{"--snapshot_backup_dir=/backup"}, "--snapshot_backup_dir"}, // no snapshots to back up
		{append(snap, "--snapshot_child_timeout_seconds=0"), "--snapshot_child_timeout_seconds"},
		{[]string{"--max_total_pending_tasks=-1"}, "--max_total_pending_tasks"},
		{[]string{"--max_total_processing_tasks=-1"}, "--max_total_processing_tasks"},
		{[]string{"--max_total_finished_tasks=-1"}, "--max_total_finished_tasks"},
		{[]string{"--max_retry_attempts=-1"}, "--max_retry_attempts"},
		{[]string{"--pending_task_timeout_sec=-1"}, "pending_task_timeout_sec"},
		{[]string{"--processing_task_timeout_sec=soon"}, "processing_task_timeout_sec"},
	} {
		var out bytes.Buffer
		err := run(tc.args, &out, nil)
		if !errors.As(err, new(cli.UsageError)) || !strings.Contains(out.String(), tc.flag) {
			t.Errorf("run(%q) = %v with output %q, want a usage error naming %s", tc.args, err, out.String(), tc.flag)
		}
	}
}

// TestUpstreamNewerFlagsTakeEffect: the newer upstream flags this master
// honours reach its configuration, with upstream's defaults (what they do
// is tested in kvstore/master: testdata/task_limits.txt,
// testdata/dynamic_replication.txt), and the default values of the
// refused ones are accepted.
func TestUpstreamNewerFlagsTakeEffect(t *testing.T) {
	t.Setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", "/snapshots")
	snap := []string{"--enable_ha", "--etcd_endpoints=x:1", "--enable_oplog", "--enable_snapshot"}
	for _, tc := range []struct {
		args  []string
		check func(o *options) bool
	}{
		{nil, func(o *options) bool {
			l := o.cfg.Tasks
			return l.MaxPending == 10000 && l.MaxProcessing == 10000 && l.MaxFinished == 10000 &&
				l.PendingTimeout == 300*time.Second && l.ProcessingTimeout == 300*time.Second && l.MaxRetryAttempts == 10
		}},
		{[]string{"--max_total_pending_tasks=5", "--max_total_processing_tasks=6", "--max_total_finished_tasks=7",
			"--pending_task_timeout_sec=8", "--processing_task_timeout_sec=0", "--max_retry_attempts=0"}, func(o *options) bool {
			l := o.cfg.Tasks
			return l.MaxPending == 5 && l.MaxProcessing == 6 && l.MaxFinished == 7 &&
				l.PendingTimeout == 8*time.Second && l.ProcessingTimeout == 0 && l.MaxRetryAttempts == 0
		}},
		{nil, func(o *options) bool {
			c := o.cfg.DynamicReplication
			return c.Mode == master.DynamicReplicationOff && c.HeatWindow == 10*time.Second && c.AdmissionQPS == 0.8 && c.MaxMemoryReplicas == 2
		}},
		{[]string{"--dynamic_replication_mode=enforce", "--dynamic_replication_heat_window_seconds=30",
			"--dynamic_replication_admission_qps_threshold=2.5", "--dynamic_replication_max_memory_replicas=3"}, func(o *options) bool {
			c := o.cfg.DynamicReplication
			return c.Mode == master.DynamicReplicationEnforce && c.HeatWindow == 30*time.Second && c.AdmissionQPS == 2.5 && c.MaxMemoryReplicas == 3
		}},
		{[]string{"--dynamic_replication_mode=observe"}, func(o *options) bool {
			return o.cfg.DynamicReplication.Mode == master.DynamicReplicationObserve
		}},
		{[]string{"--enable_multi_tenants", "--tenant_quota_connector_type=file", "--tenant_quota_connector_uri=/etc/quotas.yaml"}, func(o *options) bool {
			return o.tenantPolicyFile == "/etc/quotas.yaml"
		}},
		{nil, func(o *options) bool { return o.tenantPolicyFile == "" }},
		{[]string{"--enable_ha", "--ha_backend_type=redis", "--ha_backend_connstring=redis://h:6380"}, func(o *options) bool {
			return o.haRedis != nil && o.haRedis.Addr == "h:6380"
		}},
		{[]string{"--ha_backend_type=redis"}, func(o *options) bool { return o.haRedis == nil }}, // no --enable_ha: no election
		{[]string{"--enable_ha", "--etcd_endpoints=h:2379"}, func(o *options) bool { return o.haRedis == nil }},
		{[]string{"--ha_backend_type=etcd", "--tenant_quota_connector_type=file", "--tenant_quota_connector_uri=", "--pod_name=", "--pod_namespace=",
			"--enable_disk_eviction=true"}, func(o *options) bool { return true }},
		{snap, func(o *options) bool {
			c := o.snapshotConfig
			return c.Timeout == time.Hour && c.BackupDir == ""
		}},
		{append(snap, "--snapshot_backup_dir=/backup", "--snapshot_child_timeout_seconds=60", "--snapshot_catalog_store_type=embedded",
			"--snapshot_payload_store_type=local"), func(o *options) bool {
			c := o.snapshotConfig
			return c.Timeout == time.Minute && c.BackupDir == "/backup" && c.Dir == "/snapshots"
		}},
		{append(snap, "--snapshot_catalog_backend_type=payload", "--snapshot_payload_backend_type=local"), func(o *options) bool {
			return o.snapshotConfig != nil
		}},
	} {
		o, err := parse(tc.args, io.Discard)
		if err != nil || !tc.check(o) {
			t.Errorf("parse(%q) = %+v, %v", tc.args, o, err)
		}
	}
}

// TestKVEventsFlagsMatchUpstream: every kv_events flag of upstream's
// master is declared under its name with its default.
func TestKVEventsFlagsMatchUpstream(t *testing.T) {
	fs := newFlagSet(&options{}, io.Discard)
	for name, def := range map[string]string{
		"enable_kv_events": "false", "kv_events_bind_endpoint": "", "kv_events_backend_id": "",
		"kv_events_model_name": "", "kv_events_block_size": "0", "kv_events_additional_salt": "",
		"kv_events_lora_name": "", "kv_events_dp_rank": "0", "kv_events_tenant_id": "default",
		"kv_events_emit_object_key": "true", "kv_events_emit_legacy_compat": "true", "kv_events_queue_capacity": "65536",
	} {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("--%s is not declared", name)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s defaults to %q, upstream's to %q", name, f.DefValue, def)
		}
	}
	var ours []string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "kv_events_") {
			ours = append(ours, f.Name)
		}
	})
	if len(ours) != 13 { // upstream's 11 and the replay endpoint and buffer
		t.Errorf("kv_events flags %v: want upstream's 11 and kv_events_replay_endpoint, kv_events_replay_buffer_steps", ours)
	}
}

// TestBinaryLoadsTheTenantQuotaPolicyFile: a master started with the
// file connector serves the file's tenants and writes a quota change
// back to the file.
func TestBinaryLoadsTheTenantQuotaPolicyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(path, []byte("version: 1\ntenants:\n  - name: \"tenant-a\"\n    quota: 2KB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ports := testutil.FreePorts(t, 2)
	p := startMaster(t, fmt.Sprintf("--rpc_port=%d", ports[0]), "--rpc_address=127.0.0.1",
		"--metrics_port", fmt.Sprint(ports[1]), "--metrics_host=127.0.0.1",
		"--enable_multi_tenants", "--tenant_quota_connector_type=file", "--tenant_quota_connector_uri="+path)
	url := fmt.Sprintf("http://127.0.0.1:%d/api/v1/tenant_quotas", ports[1])
	if body := waitHTTP(t, p, url+"?tenant_id=tenant-a"); !strings.Contains(body, `"quota_bytes":2048`) {
		t.Fatalf("tenant-a from the policy file: %s", body)
	}
	req, err := http.NewRequest("PUT", url, strings.NewReader(`{"tenant_id":"tenant-b","quota_bytes":4096}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	data, err := os.ReadFile(path)
	if resp.StatusCode != http.StatusOK || err != nil || !strings.Contains(string(data), `"tenant-b"`) {
		t.Fatalf("PUT tenant-b: %d; policy file now %q (%v)", resp.StatusCode, data, err)
	}
}
