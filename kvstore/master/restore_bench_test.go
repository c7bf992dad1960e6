package master

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// restoreObjects is how many objects the restore benchmarks hold:
// $MC_RESTORE_OBJECTS, 100 000 by default (docs/store-durability.md has
// the numbers at 10^6 and 10^7).
func restoreObjects(b *testing.B) int {
	if v := os.Getenv("MC_RESTORE_OBJECTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("MC_RESTORE_OBJECTS=%q", v)
		}
		return n
	}
	return 100_000
}

// cpuTime is the CPU time the process has used (all threads, the garbage
// collector's included): on a shared host wall time says little alone.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// putLog is the log of a mount and n puts (start and end each) of 4 KiB
// objects, as a leader writes it.
func putLog(b *testing.B, n int) []replication.Entry {
	b.Helper()
	rpc := func(i int, method string, m proto.Message) replication.Entry {
		p, err := proto.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		return replication.Entry{Kind: replication.KindRPC, N: uint64(i), Now: time.Unix(1_800_000_000, int64(i)), Name: method, Payload: p}
	}
	log := []replication.Entry{rpc(0, masterpb.Master_MountSegment_FullMethodName, &masterpb.MountSegmentRequest{ClientId: "storage",
		Segment: &masterpb.Segment{Id: "id0", Name: "seg0", Base: 1 << 30, Size: 1 << 44, TeEndpoint: "seg0"}})}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("object-%09d", i)
		log = append(log,
			rpc(len(log), masterpb.Master_PutStart_FullMethodName, &masterpb.PutStartRequest{ClientId: "writer", Key: key,
				Size: 4096, Config: &masterpb.ReplicateConfig{ReplicaNum: 1}}),
			rpc(len(log)+1, masterpb.Master_PutEnd_FullMethodName, &masterpb.PutEndRequest{ClientId: "writer", Key: key}))
	}
	return log
}

func benchReplica(b *testing.B) *replicator {
	b.Helper()
	cfg := DefaultConfig()
	cfg.ClientTTL = 1000 * time.Hour
	s, err := NewServer(Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	s.EnableOplog()
	s.rep.register(nopRegistrar{})
	return s.rep
}

// nopRegistrar records the handlers' services nowhere: replay needs only
// the handler table that register fills.
type nopRegistrar struct{}

func (nopRegistrar) RegisterService(*grpc.ServiceDesc, any) {}

// BenchmarkOplogReplay replays the log of restoreObjects puts, as a
// standby without a snapshot does at startup: objects/s.
func BenchmarkOplogReplay(b *testing.B) {
	n := restoreObjects(b)
	log := putLog(b, n)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		r := benchReplica(b)
		start, cpu := time.Now(), cpuTime(b)
		for i := range log {
			r.replay(&log[i])
		}
		el := time.Since(start)
		b.ReportMetric((cpuTime(b) - cpu).Seconds(), "replay_cpu_s")
		if keys := dumpState(r.s).Keys; keys != n {
			b.Fatalf("%d objects after the replay, want %d", keys, n)
		}
		b.ReportMetric(float64(n)/el.Seconds(), "objects/s")
		b.ReportMetric(el.Seconds(), "replay_s")
	}
}

// BenchmarkSnapshotRestore decodes a snapshot of restoreObjects objects,
// as a standby or restarted master with --enable_snapshot_restore does.
func BenchmarkSnapshotRestore(b *testing.B) {
	n := restoreObjects(b)
	r := benchReplica(b)
	for _, e := range putLog(b, n) {
		r.replay(&e)
	}
	data := encodeSnapshot(r.s.st, 1, uint64(2*n+1))
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		start, cpu := time.Now(), cpuTime(b)
		st, _, err := decodeSnapshot(data, r.s.st.cfg)
		el := time.Since(start)
		b.ReportMetric((cpuTime(b) - cpu).Seconds(), "restore_cpu_s")
		if err != nil || st.objects.len() != n {
			b.Fatalf("restore: %v, %d objects", err, st.objects.len())
		}
		b.ReportMetric(el.Seconds(), "restore_s")
		b.ReportMetric(float64(len(data))/float64(n), "bytes/object")
	}
}
