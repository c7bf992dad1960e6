package master

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// Scripted scenarios in the style of etcd raft's datadriven tests. Each
// file in testdata/ is a sequence of blocks:
//
//	command arg=value flag ...
//	----
//	expected output
//
// separated by blank lines; lines starting with # are comments. The driver
// runs each command against one State with a fake clock and compares the
// output. Run with -rewrite to regenerate the expected outputs (then read
// the diff!).
//
// Commands (client= defaults to c1, seg= to s1; sizes in bytes):
//
//	config [lease= default_pin= max_pin= ratio= watermark= client_ttl= client_dead_ttl= discard= release= allow_soft=]
//	       [max_pending= max_processing= max_finished= pending_timeout= processing_timeout= max_retries=]
//	       [dyn_mode=off|observe|enforce dyn_window= dyn_qps= dyn_max=]   dynamic_replication (its counters)
//	tick d=DURATION                      advance the fake clock
//	mount seg= size= [name= host= hi= lo= endpoint= inc=] remount segs=ID:SIZE[:INC],...   unmount seg=   drain seg=
//	ping [inc=] | expire                 client liveness (expire prints suspect and expired clients)
//	put_start | upsert_start key= size= [replicas= pin=enable|disable pin_ttl= hard prefer=a,b host=]
//	put_end | put_revoke key=            put key= size= ...  (start + end)
//	reserve size= [release=ID,...]       commit key= size= res=ID off= [...]   reserved
//	get | exist | query key=             remove key= [force]
//	remove_all [force] | remove_regex pattern= [force]
//	evict | release | stats | keys [raw] (raw: quoted object keys)
//	suspicion                            each segment's client, mode, suspicion; the suspicion counters
//	quota tenant= bytes= | unquota tenant= | tenants
//	replica_clear keys=a,b [seg=NAME]    (client= is the caller)
//	copy_task key= targets=a,b | move_task key= from= to=   (print task tN)
//	fetch_tasks                          (client= is the executor)
//	complete_task task=tN [fail] [msg=]  | query_task task=tN
//	fleet commands and placement arguments: scenario_fleet_test.go
//	disk tier: see disk_scenario_test.go
//
// With "config multi_tenant=true", tenant=T on any command names the
// tenant whose keys it works on (the default tenant when absent); an id
// the master refuses prints its code.

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of scenario files")

// epoch is the fake clock's origin; scenario output prints times relative
// to it.
var epoch = time.Unix(1_000_000, 0)

// segBase is the base address of every segment a scenario mounts; output
// prints addresses as offsets from it.
const segBase = 0x100000

type scenario struct {
	t     *testing.T
	st    *State
	now   time.Time
	tasks []TaskID // tasks in the order seen; scenarios name them t1, t2, ...
	// resBase is one less than the first reservation id: scenarios name
	// reservations 1, 2, ... (ids start at a random point).
	resBase uint64
}

// taskName is how scenario output names a task id: a task the master
// created by itself (dynamic replication) gets the next name when first
// printed.
func (s *scenario) taskName(id TaskID) string {
	for i, t := range s.tasks {
		if t == id {
			return fmt.Sprintf("t%d", i+1)
		}
	}
	s.tasks = append(s.tasks, id)
	return fmt.Sprintf("t%d", len(s.tasks))
}

// taskID resolves a scenario task name (tN); anything else is an id
// never issued.
func (s *scenario) taskID(name string) TaskID {
	if n, err := strconv.Atoi(strings.TrimPrefix(name, "t")); err == nil && n >= 1 && n <= len(s.tasks) {
		return s.tasks[n-1]
	}
	return TaskID{Hi: 1, Lo: 1}
}

func (s *scenario) taskCreated(id TaskID, code kvstore.ErrorCode) string {
	if code != kvstore.OK {
		return code.String() + "\n"
	}
	s.tasks = append(s.tasks, id)
	return "OK " + s.taskName(id) + "\n"
}

type cmd struct {
	name  string
	args  map[string]string
	flags map[string]bool
}

func parseCmd(line string) cmd {
	f := strings.Fields(line)
	c := cmd{name: f[0], args: map[string]string{}, flags: map[string]bool{}}
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			c.args[k] = v
		} else {
			c.flags[a] = true
		}
	}
	return c
}

func (c cmd) str(k, def string) string {
	if v, ok := c.args[k]; ok {
		return v
	}
	return def
}

func (c cmd) dur(t *testing.T, k string, def time.Duration) time.Duration {
	v, ok := c.args[k]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: bad duration %q", k, v)
	}
	return d
}

func (c cmd) num(t *testing.T, k string, def uint64) uint64 {
	v, ok := c.args[k]
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		t.Fatalf("%s: bad number %q", k, v)
	}
	return n
}

func (c cmd) float(t *testing.T, k string, def float64) float64 {
	v, ok := c.args[k]
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s: bad float %q", k, v)
	}
	return f
}

func (c cmd) replicateConfig(t *testing.T) ReplicateConfig {
	rc := ReplicateConfig{ReplicaNum: int(c.num(t, "replicas", 1)), HardPin: c.flags["hard"]}
	switch c.str("pin", "preserve") {
	case "enable":
		rc.SoftPin = SoftPinEnable
	case "disable":
		rc.SoftPin = SoftPinDisable
	}
	if _, ok := c.args["pin_ttl"]; ok {
		d := c.dur(t, "pin_ttl", 0)
		rc.SoftPinTTL = &d
	}
	if p := c.str("prefer", ""); p != "" {
		rc.PreferredSegments = strings.Split(p, ",")
	}
	if h := c.str("host", ""); h != "" {
		rc.PreferSameNode, rc.HostID = true, h
	}
	fleetPlacement(t, c, &rc)
	return rc
}

func fmtReplicas(rs []Replica) string {
	var b strings.Builder
	for _, r := range rs {
		if r.Type == ReplicaLocalDisk {
			fmt.Fprintf(&b, "  disk of %s at %s size=%d\n", r.DiskClient, r.Endpoint, r.Size)
			continue
		}
		fmt.Fprintf(&b, "  %s+%d size=%d %s\n", r.SegmentID, r.Address-segBase, r.Size, r.Status)
	}
	return b.String()
}

func (s *scenario) rel(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return "+" + t.Sub(epoch).String()
}

func (s *scenario) run(c cmd) string {
	t := s.t
	tenant := DefaultTenant
	if id, ok := c.args["tenant"]; ok && c.name != "quota" && c.name != "unquota" {
		var code kvstore.ErrorCode
		if tenant, code = s.st.Config().ResolveTenant(id); code != kvstore.OK {
			return code.String() + "\n"
		}
	}
	key := c.str("key", "")
	if s.st != nil {
		key = s.st.Config().ObjectKey(tenant, key)
	}
	cl := c.str("client", "c1")
	force := c.flags["force"]
	switch c.name {
	case "config":
		cfg := DefaultConfig()
		cfg.DefaultLeaseTTL = c.dur(t, "lease", cfg.DefaultLeaseTTL)
		cfg.DefaultSoftPinTTL = c.dur(t, "default_pin", cfg.DefaultSoftPinTTL)
		cfg.MaxSoftPinTTL = c.dur(t, "max_pin", cfg.MaxSoftPinTTL)
		cfg.EvictionRatio = c.float(t, "ratio", cfg.EvictionRatio)
		cfg.EvictionHighWatermarkRatio = c.float(t, "watermark", cfg.EvictionHighWatermarkRatio)
		cfg.ClientTTL = c.dur(t, "client_ttl", cfg.ClientTTL)
		cfg.ClientDeadTTL = c.dur(t, "client_dead_ttl", cfg.ClientDeadTTL)
		cfg.PutStartDiscardTimeout = c.dur(t, "discard", cfg.PutStartDiscardTimeout)
		cfg.PutStartReleaseTimeout = c.dur(t, "release", cfg.PutStartReleaseTimeout)
		cfg.AllowEvictSoftPinned = c.str("allow_soft", "true") == "true"
		cfg.MultiTenant = c.str("multi_tenant", "false") == "true"
		cfg.Offload = c.offloadConfig(t)
		cfg.Tasks.MaxPending = int(c.num(t, "max_pending", uint64(cfg.Tasks.MaxPending)))
		cfg.Tasks.MaxProcessing = int(c.num(t, "max_processing", uint64(cfg.Tasks.MaxProcessing)))
		cfg.Tasks.MaxFinished = int(c.num(t, "max_finished", uint64(cfg.Tasks.MaxFinished)))
		cfg.Tasks.PendingTimeout = c.dur(t, "pending_timeout", cfg.Tasks.PendingTimeout)
		cfg.Tasks.ProcessingTimeout = c.dur(t, "processing_timeout", cfg.Tasks.ProcessingTimeout)
		cfg.Tasks.MaxRetryAttempts = int(c.num(t, "max_retries", uint64(cfg.Tasks.MaxRetryAttempts)))
		if m, ok := c.args["dyn_mode"]; ok {
			mode, err := ParseDynamicReplicationMode(m)
			if err != nil {
				t.Fatal(err)
			}
			cfg.DynamicReplication.Mode = mode
		}
		cfg.DynamicReplication.HeatWindow = c.dur(t, "dyn_window", cfg.DynamicReplication.HeatWindow)
		cfg.DynamicReplication.AdmissionQPS = c.float(t, "dyn_qps", cfg.DynamicReplication.AdmissionQPS)
		cfg.DynamicReplication.MaxMemoryReplicas = int(c.num(t, "dyn_max", uint64(cfg.DynamicReplication.MaxMemoryReplicas)))
		st, err := NewState(cfg)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		s.st, s.now, s.tasks = st, epoch, nil
		return "ok\n"
	case "tick":
		s.now = s.now.Add(c.dur(t, "d", time.Second))
		return "now=" + s.rel(s.now) + "\n"
	case "mount":
		seg := Segment{ID: c.str("seg", "s1"), Base: segBase, Size: c.num(t, "size", 1024), HostID: c.str("host", ""),
			HighWatermark: int(c.num(t, "hi", 0)), LowWatermark: int(c.num(t, "lo", 0)),
			TEEndpoint: c.str("endpoint", ""), Incarnation: c.num(t, "inc", 0)}
		seg.Name = c.str("name", seg.ID)
		return s.st.MountSegment(cl, seg, s.now).String() + "\n"
	case "remount":
		var segs []Segment
		for _, spec := range strings.Split(c.str("segs", ""), ",") {
			if spec == "" {
				continue
			}
			id, rest, _ := strings.Cut(spec, ":")
			size, inc, _ := strings.Cut(rest, ":")
			n, _ := strconv.ParseUint(size, 0, 64)
			i, _ := strconv.ParseUint(inc, 0, 64)
			segs = append(segs, Segment{ID: id, Name: id, Base: segBase, Size: n, Incarnation: i})
		}
		return s.st.ReMountSegment(cl, segs, s.now).String() + "\n"
	case "unmount":
		return s.st.UnmountSegment(cl, c.str("seg", "s1"), s.now).String() + "\n"
	case "drain":
		return s.st.DrainSegment(cl, c.str("seg", "s1"), s.now).String() + "\n"
	case "ping":
		status, code := s.st.Ping(cl, c.num(t, "inc", 0), s.now)
		if code != kvstore.OK {
			return code.String() + "\n"
		}
		return map[ClientStatus]string{ClientOK: "OK", ClientNeedRemount: "NEED_REMOUNT"}[status] + "\n"
	case "expire":
		var b strings.Builder
		ex := s.st.ExpireClients(s.now)
		for _, id := range ex.Suspected {
			fmt.Fprintf(&b, "suspect %s\n", id)
		}
		for _, e := range ex.Expired {
			fmt.Fprintf(&b, "expired %s %s\n", e.ClientID, e.Segment.ID)
		}
		if b.Len() == 0 {
			return "none\n"
		}
		return b.String()
	case "put_start", "upsert_start":
		f := s.st.PutStart
		if c.name == "upsert_start" {
			f = s.st.UpsertStart
		}
		rs, code := f(cl, key, c.num(t, "size", 100), c.replicateConfig(t), s.now)
		return code.String() + "\n" + fmtReplicas(rs)
	case "put_end":
		return s.st.PutEnd(cl, key, nil, s.now).String() + "\n"
	case "put_revoke":
		return s.st.PutRevoke(cl, key, s.now).String() + "\n"
	case "put":
		rs, code := s.st.PutStart(cl, key, c.num(t, "size", 100), c.replicateConfig(t), s.now)
		if code != kvstore.OK {
			return code.String() + "\n"
		}
		var at []string
		for _, r := range rs {
			at = append(at, fmt.Sprintf("%s+%d", r.SegmentID, r.Address-segBase))
		}
		return s.st.PutEnd(cl, key, nil, s.now).String() + " at " + strings.Join(at, ",") + "\n"
	case "reserve":
		var release []uint64
		for _, id := range strings.Split(c.str("release", ""), ",") {
			if id != "" {
				n, _ := strconv.ParseUint(id, 10, 64)
				release = append(release, n+s.resBase)
			}
		}
		r, code := s.st.Reserve(cl, tenant, c.num(t, "size", 1024), release, s.now)
		if code != kvstore.OK || r.ID == 0 {
			return code.String() + "\n"
		}
		if s.resBase == 0 {
			s.resBase = r.ID - 1
		}
		return fmt.Sprintf("OK id=%d at %s+%d size=%d\n", r.ID-s.resBase, r.Block.SegmentID, r.Block.Address-segBase, r.Block.Size)
	case "commit":
		code, gone := s.st.PutCommit(cl, key, c.num(t, "size", 100), c.num(t, "res", 1)+s.resBase, c.num(t, "off", 0), nil, c.replicateConfig(t), s.now)
		if gone {
			return code.String() + " (reservation gone)\n"
		}
		return code.String() + "\n"
	case "reserved":
		n, bytes := s.st.Reserved()
		return fmt.Sprintf("reservations=%d unused=%d\n", n, bytes)
	case "get":
		res, code := s.st.GetReplicaList(key, s.now)
		if code != kvstore.OK {
			return code.String() + "\n"
		}
		return fmt.Sprintf("OK lease_ttl=%s\n", res.LeaseTTL) + fmtReplicas(res.Replicas)
	case "exist":
		ok, code := s.st.ExistKey(key, s.now)
		return fmt.Sprintf("%v %s\n", ok, code.String())
	case "remove":
		return s.st.Remove(key, force, s.now).String() + "\n"
	case "remove_all":
		return fmt.Sprintf("removed %d\n", s.st.RemoveAll(tenant, "", force, s.now))
	case "remove_regex":
		n, code := s.st.RemoveByRegex(tenant, "", c.str("pattern", ""), force, s.now)
		return fmt.Sprintf("%s removed %d\n", code.String(), n)
	case "evict":
		r := s.st.Evict(s.now)
		if !r.Plan.Triggered && r.FreedBytes == 0 {
			return fmt.Sprintf("not triggered used=%.3f\n", r.Plan.UsedRatio)
		}
		return fmt.Sprintf("used=%.3f target=%.3f lower=%.3f evicted=%v freed=%d\n",
			r.Plan.UsedRatio, r.Plan.Target, r.Plan.LowerBound, r.Evicted, r.FreedBytes)
	case "release":
		n := s.st.ReleaseExpired(s.now)
		st := s.st.Stats()
		return fmt.Sprintf("discarded_writes=%d quarantined=%d allocated=%d\n", n, st.Quarantined, st.AllocatedBytes)
	case "suspicion":
		var b strings.Builder
		for _, sg := range s.st.Segments() {
			fmt.Fprintf(&b, "%s client=%s %s suspect=%t allocated=%d\n", sg.ID, sg.ClientID, sg.Mode, sg.Suspect, sg.Allocated)
		}
		st := s.st.Stats()
		fmt.Fprintf(&b, "suspect_clients=%d suspect_segments=%d suspected=%d restored=%d replaced=%d\n",
			st.SuspectClients, st.SuspectSegments, st.SuspectedClients, st.RestoredClients, st.ReplacedSegments)
		return b.String()
	case "stats":
		st := s.st.Stats()
		return fmt.Sprintf("keys=%d allocated=%d capacity=%d clients=%d segments=%d soft_pinned=%d quarantined=%d evicted=%d\n",
			st.KeyCount, st.AllocatedBytes, st.CapacityBytes, st.ActiveClients, st.Segments,
			st.SoftPinKeyCount, st.Quarantined, st.EvictedKeys)
	case "keys":
		if _, ok := c.args["tenant"]; ok {
			return fmt.Sprintf("%v\n", s.st.TenantKeys(tenant))
		}
		if c.flags["raw"] {
			return fmt.Sprintf("%q\n", s.st.Keys())
		}
		return fmt.Sprintf("%v\n", s.st.Keys())
	case "quota":
		return s.st.SetTenantQuota(c.str("tenant", ""), c.num(t, "bytes", 0)).String() + "\n"
	case "unquota":
		return s.st.DeleteTenantQuota(c.str("tenant", "")).String() + "\n"
	case "tenants":
		var b strings.Builder
		for _, ti := range s.st.Tenants() {
			fmt.Fprintf(&b, "%s quota=%d used=%d objects=%d\n", ti.ID, ti.QuotaBytes, ti.UsedBytes, ti.Objects)
		}
		return b.String()
	case "replica_clear":
		var keys []string
		for _, k := range strings.Split(c.str("keys", ""), ",") {
			keys = append(keys, s.st.Config().ObjectKey(tenant, k))
		}
		var cleared []string
		for _, i := range s.st.BatchReplicaClear(cl, keys, c.str("seg", ""), s.now) {
			cleared = append(cleared, s.st.UserKey(keys[i]))
		}
		return fmt.Sprintf("cleared %v\n", cleared)
	case "copy_task":
		return s.taskCreated(s.st.CreateCopyTask(key, strings.Split(c.str("targets", ""), ","), s.now))
	case "move_task":
		return s.taskCreated(s.st.CreateMoveTask(key, c.str("from", ""), c.str("to", ""), s.now))
	case "fetch_tasks":
		var b strings.Builder
		for _, a := range s.st.FetchTasks(cl, s.now) {
			fmt.Fprintf(&b, "%s %s size=%d from %s+%d to", s.taskName(a.ID), a.Type, a.Size, a.Source.SegmentID, a.Source.Address-segBase)
			for _, r := range a.Targets {
				fmt.Fprintf(&b, " %s+%d", r.SegmentID, r.Address-segBase)
			}
			b.WriteString("\n")
		}
		if b.Len() == 0 {
			return "none\n"
		}
		return b.String()
	case "complete_task":
		return s.st.CompleteTask(cl, s.taskID(c.str("task", "")), !c.flags["fail"], c.str("msg", ""), s.now).String() + "\n"
	case "dynamic_replication":
		st := s.st.Stats()
		return fmt.Sprintf("proposals=%d tasks=%d\n", st.DynamicReplicationProposals, st.DynamicReplicationTasks)
	case "query_task":
		ti, code := s.st.QueryTask(tenant, s.taskID(c.str("task", "")))
		if code != kvstore.OK {
			return code.String() + "\n"
		}
		return fmt.Sprintf("%s %s %s assigned=%s created=%s updated=%s message=%q\n", s.taskName(ti.ID), ti.Type, ti.Status,
			ti.AssignedClient, s.rel(ti.Created), s.rel(ti.Updated), ti.Message)
	case "query":
		o, ok := s.st.QueryKey(key)
		if !ok {
			return "absent\n"
		}
		return fmt.Sprintf("size=%d writer=%s writing=%v lease=%s soft_pin_until=%s hard=%v\n",
			o.Size, o.Writer, o.Writing, s.rel(o.LeaseUntil), s.rel(o.SoftPinUntil), o.HardPinned) + fmtReplicas(o.Replicas)
	}
	if out, ok := s.runDisk(c, key, cl); ok {
		return out
	}
	if out, ok := s.fleetCommand(c, cl); ok {
		return out
	}
	t.Fatalf("unknown command %q", c.name)
	return ""
}

type block struct {
	cmd, want string
}

func parseScenario(t *testing.T, data string) []block {
	var out []block
	lines := strings.Split(data, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		b := block{cmd: l}
		i++
		if i >= len(lines) || strings.TrimSpace(lines[i]) != "----" {
			t.Fatalf("line %d: command %q not followed by ----", i, l)
		}
		var want []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			want = append(want, lines[i])
		}
		if len(want) > 0 {
			b.want = strings.Join(want, "\n") + "\n"
		}
		out = append(out, b)
	}
	return out
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			// Comments are kept on rewrite by re-emitting each block after
			// the comment lines that precede it.
			blocks := parseScenario(t, string(data))
			s := &scenario{t: t}
			s.run(parseCmd("config"))
			var out strings.Builder
			comments := leadingComments(string(data))
			for i, b := range blocks {
				got := s.run(parseCmd(b.cmd))
				checkTenantUsage(t, s.st, b.cmd)
				if *rewrite {
					out.WriteString(comments[i])
					fmt.Fprintf(&out, "%s\n----\n%s\n", b.cmd, got)
					continue
				}
				if got != b.want {
					t.Errorf("%s: block %d %q:\ngot:\n%swant:\n%s", file, i+1, b.cmd, got, b.want)
				}
			}
			if *rewrite {
				if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// leadingComments returns, for each block, the comment lines (with a
// blank line before them when there were any) that precede its command.
func leadingComments(data string) []string {
	var out []string
	var cur []string
	lines := strings.Split(data, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case strings.HasPrefix(l, "#"):
			cur = append(cur, lines[i])
		case l == "":
		default:
			s := ""
			if len(cur) > 0 {
				s = strings.Join(cur, "\n") + "\n"
			}
			out = append(out, s)
			cur = nil
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			}
		}
	}
	return slices.Clip(out)
}

// checkTenantUsage verifies the incremental quota accounting against a
// recount of every object's replicas.
func checkTenantUsage(t *testing.T, st *State, after string) {
	t.Helper()
	used, objects := map[string]uint64{}, map[string]int{}
	for o := range st.objects.all() {
		tenant, _ := st.splitKey(o.key)
		used[tenant] += o.size * uint64(len(o.replicas))
		if len(o.replicas) > 0 { // disk-only objects hold no quota
			objects[tenant]++
		}
	}
	for _, ti := range st.Tenants() {
		if ti.UsedBytes != used[ti.ID] || ti.Objects != objects[ti.ID] {
			t.Fatalf("after %q: tenant %s accounts used=%d objects=%d, recount %d, %d",
				after, ti.ID, ti.UsedBytes, ti.Objects, used[ti.ID], objects[ti.ID])
		}
		delete(used, ti.ID)
	}
	for tenant := range used {
		t.Fatalf("after %q: objects of unregistered tenant %q", after, tenant)
	}
}
