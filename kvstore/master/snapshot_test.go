package master

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// roundTrip encodes st and decodes it back, failing t unless the result
// encodes to the same bytes. The random source and the promotion
// admission sketch are not in a snapshot (replay reseeds the source per
// entry; the sketch restarts): they are carried over so that the caller
// can keep running on the copy.
func roundTrip(t *testing.T, st *State) *State {
	t.Helper()
	b := encodeSnapshot(st, 7, 11)
	got, h, err := decodeSnapshot(b, st.cfg)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if h.seq != 7 || h.nextN != 11 {
		t.Fatalf("header %+v", h)
	}
	if again := encodeSnapshot(got, 7, 11); !bytes.Equal(again, b) {
		t.Fatalf("decoded state encodes differently (%d bytes, want %d)", len(again), len(b))
	}
	got.rng, got.disk.hits = st.rng, st.disk.hits
	return got
}

// TestSnapshotRestoredStateBehavesTheSame runs every scenario with the
// state replaced by its snapshot's decoding after each command: every
// later answer must be the one the original state gave.
func TestSnapshotRestoredStateBehavesTheSame(t *testing.T) {
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
			s := &scenario{t: t}
			s.run(parseCmd("config"))
			for i, b := range parseScenario(t, string(data)) {
				if got := s.run(parseCmd(b.cmd)); got != b.want {
					t.Fatalf("block %d %q after restores:\ngot:\n%swant:\n%s", i+1, b.cmd, got, b.want)
				}
				s.st = roundTrip(t, s.st)
			}
		})
	}
}

func TestSnapshotCorruptionIsDetected(t *testing.T) {
	st, err := NewState(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	b := encodeSnapshot(st, 3, 4)
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x40
		if _, _, err := decodeSnapshot(bad, st.cfg); err == nil {
			t.Fatalf("a flipped byte %d decoded", i)
		}
	}
	for n := 0; n < len(b); n++ {
		if _, _, err := decodeSnapshot(b[:n], st.cfg); err == nil {
			t.Fatalf("a snapshot truncated to %d bytes decoded", n)
		}
	}
}

// withChecksum replaces b's last 4 bytes with the checksum of the rest.
func withChecksum(b []byte) []byte {
	if len(b) < 4 {
		return b
	}
	out := bytes.Clone(b)
	binary.BigEndian.PutUint32(out[len(out)-4:], crc32.Checksum(out[:len(out)-4], crc32c))
	return out
}

// FuzzDecodeSnapshot feeds arbitrary bytes, and the same bytes with a
// valid checksum (so that the body's parser is reached), to the decoder:
// it must not panic, and what it accepts must encode to bytes it accepts
// and encodes the same way.
func FuzzDecodeSnapshot(f *testing.F) {
	st, err := NewState(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(encodeSnapshot(st, 1, 2))
	f.Add([]byte("MCSN\x01\x00\x00\x00\x00\x00\x00"))
	// A state with a reservation partly committed.
	withBlock, _ := NewState(DefaultConfig())
	withBlock.MountSegment("c1", Segment{ID: "s1", Name: "s1", Base: 1 << 20, Size: 1 << 16}, epoch)
	if r, code := withBlock.Reserve("c1", DefaultTenant, 4096, nil, epoch); code == kvstore.OK {
		withBlock.PutCommit("c1", "k", 100, r.ID, 512, nil, ReplicateConfig{ReplicaNum: 1}, epoch)
	}
	f.Add(encodeSnapshot(withBlock, 3, 4))
	// A version 6 file, with its allocators' tables (the older decoding
	// path), holding every kind of holder of segment bytes.
	v6, err := os.ReadFile("testdata/snapshot_v6.bin")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v6)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, withChecksum(b)} {
			got, h, err := decodeSnapshot(in, st.cfg)
			if err != nil {
				continue
			}
			enc := encodeSnapshot(got, h.seq, h.nextN)
			again, _, err := decodeSnapshot(enc, st.cfg)
			if err != nil {
				t.Fatalf("re-encoded snapshot does not decode: %v", err)
			}
			if !bytes.Equal(encodeSnapshot(again, h.seq, h.nextN), enc) {
				t.Fatal("re-encoded snapshot encodes differently")
			}
		}
	})
}

// TestSnapshotRestoreAndCompaction: a leader's snapshot compacts the log
// in etcd; a standby that starts later restores from it plus the log
// after it and holds the leader's state byte for byte; a corrupt newest
// snapshot is skipped for the older one; a master that could only
// serve a partial state refuses to start; and with every master gone a
// new one serves the objects from snapshot and log.
func TestSnapshotRestoreAndCompaction(t *testing.T) {
	ep := testutil.StartEtcd(t)
	cli := testutil.EtcdClient(t, ep)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	const cluster = "snap"
	prefix := replication.OplogPrefix(cluster)
	// The storage client never pings: a slow run must not expire it
	// (which would drop its objects) before the last check.
	cfg := DefaultConfig()
	cfg.ClientTTL = time.Hour
	start := func(snap *replication.SnapshotConfig) (*Service, error) {
		svc, err := StartService(ServiceConfig{
			RPCAddress: "127.0.0.1:0", Server: Options{Config: cfg}, Logger: quiet,
			HA: &replication.HAConfig{Endpoints: []string{ep}, ClusterID: cluster, Oplog: true, OplogPollInterval: 200 * time.Millisecond,
				Snapshot: snap},
		})
		if err == nil {
			t.Cleanup(svc.Close)
		}
		return svc, err
	}
	mustStart := func(snap *replication.SnapshotConfig) *Service {
		t.Helper()
		svc, err := start(snap)
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testutil.WaitUntil(t, 20*time.Second, what, cond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ok := func(code int32, err error, what string) {
		t.Helper()
		if err != nil || code != 0 {
			t.Fatalf("%s: code %d err %v", what, code, err)
		}
	}
	snapCfg := &replication.SnapshotConfig{Enable: true, Interval: time.Hour, Retention: 2, Restore: true, Dir: dir}
	a := mustStart(snapCfg)
	waitFor("a to lead", a.Server.IsLeader)
	ca := dialMaster(t, a)
	seg := &masterpb.Segment{Id: "id0", Name: "seg0", Base: 1 << 30, Size: 1 << 20, TeEndpoint: "seg0"}
	r, err := ca.ReMountSegment(ctx, &masterpb.ReMountSegmentRequest{ClientId: "storage", Segments: []*masterpb.Segment{seg}})
	ok(r.GetErrorCode(), err, "remount")
	put := func(key string) {
		t.Helper()
		r, err := ca.PutStart(ctx, &masterpb.PutStartRequest{ClientId: "writer", Key: key, Size: 100,
			Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
		ok(r.GetErrorCode(), err, "put start "+key)
		e, err := ca.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: "writer", Key: key})
		ok(e.GetErrorCode(), err, "put end "+key)
	}
	remove := func(key string) {
		t.Helper()
		r, err := ca.Remove(ctx, &masterpb.RemoveRequest{Key: key, Force: true})
		ok(r.GetErrorCode(), err, "remove "+key)
	}
	snapshot := func() uint64 {
		t.Helper()
		seq, err := a.Server.rep.log.TakeSnapshot(ctx, cli, prefix)
		if err != nil || seq == 0 {
			t.Fatalf("snapshot: %d %v", seq, err)
		}
		return seq
	}
	batches := func() []uint64 {
		t.Helper()
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for _, kv := range resp.Kvs {
			seq, _ := replication.BatchSeq(prefix, string(kv.Key))
			out = append(out, seq)
		}
		return out
	}
	for i := 0; i < 20; i++ {
		put(fmt.Sprintf("k%02d", i))
	}
	remove("k00")
	s1 := snapshot()
	// One snapshot kept so far: the log is compacted behind it.
	if got := batches(); len(got) > 0 && got[0] <= s1 {
		t.Fatalf("batches %v remain at or below snapshot %d", got, s1)
	}
	for i := 20; i < 30; i++ {
		put(fmt.Sprintf("k%02d", i))
	}
	remove("k01")
	s2 := snapshot()
	// Two kept: the batches after the older one stay, for a fallback.
	if got := batches(); len(got) == 0 || got[0] != s1+1 {
		t.Fatalf("batches %v, want them to start right after the older kept snapshot %d", got, s1)
	}
	rec, err := cli.Get(ctx, replication.SnapshotKey(cluster))
	if err != nil || len(rec.Kvs) == 0 || string(rec.Kvs[0].Value) != strconv.FormatUint(s2, 10) {
		t.Fatalf("snapshot record: %v %v, want %d", rec, err, s2)
	}
	for i := 30; i < 35; i++ {
		put(fmt.Sprintf("k%02d", i))
	}
	remove("k02")

	// The leader applies a change (a background pass included) before its
	// batch is durable, so equal batch counts can be seen while the leader
	// is one change ahead: wait until the states agree, and fail if they
	// never do.
	same := func(b *Service) {
		t.Helper()
		var got, want stateDump
		agree := func() bool {
			if b.Server.rep.log.AppliedSeq() != a.Server.rep.log.AppliedSeq() {
				return false
			}
			got, want = dumpState(b.Server), dumpState(a.Server)
			var la, lb []byte
			a.Server.WithState(func(st *State, _ time.Time) { la = encodeSnapshot(st, 0, 0) })
			b.Server.WithState(func(st *State, _ time.Time) { lb = encodeSnapshot(st, 0, 0) })
			return reflect.DeepEqual(got, want) && bytes.Equal(la, lb)
		}
		deadline := time.Now().Add(20 * time.Second)
		for !agree() {
			if time.Now().After(deadline) {
				t.Fatalf("restored standby differs from the leader (state or its encoding):\nleader  %+v\nstandby %+v", want, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	b := mustStart(snapCfg)
	same(b)

	// The newest snapshot truncated: a new standby falls back to s1 and
	// the batches after it, which compaction kept.
	path := filepath.Join(dir, cluster, fmt.Sprintf("snapshot-%020d.mcsnap", s2))
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, whole[:len(whole)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	c := mustStart(snapCfg)
	same(c)
	if err := os.WriteFile(path, whole, 0o600); err != nil {
		t.Fatal(err)
	}

	// Masters that cannot rebuild the state refuse to start.
	if _, err := start(nil); !errors.Is(err, replication.ErrSnapshotNeeded) {
		t.Fatalf("a master without snapshot restore started on a compacted log: %v", err)
	}
	if _, err := start(&replication.SnapshotConfig{Restore: true, Dir: t.TempDir()}); !errors.Is(err, replication.ErrSnapshotNeeded) {
		t.Fatalf("a master with an empty snapshot store started on a compacted log: %v", err)
	}

	// Every master gone: a new one restores and serves the objects.
	a.Close()
	b.Close()
	c.Close()
	d := mustStart(snapCfg)
	waitFor("d to lead", d.Server.IsLeader)
	cd := dialMaster(t, d)
	for i := 0; i < 35; i++ {
		r, err := cd.ExistKey(ctx, &masterpb.KeyRequest{Key: fmt.Sprintf("k%02d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if removed := i < 3; r.GetExists() == removed {
			t.Fatalf("k%02d after a restart of every master: removed %v, ExistKey %v", i, removed, r.GetExists())
		}
	}
}
