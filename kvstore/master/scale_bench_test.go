package master

import (
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
)

// scaleObjects is how many objects the table-scale benchmarks hold:
// $MC_SCALE_OBJECTS, 10^6 by default.
func scaleObjects(b *testing.B) int {
	if v := os.Getenv("MC_SCALE_OBJECTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("MC_SCALE_OBJECTS=%q", v)
		}
		return n
	}
	return 1_000_000
}

// scaleKey is the i-th object key of the scale benchmarks: 64 characters,
// the shape of a vLLM or SGLang block hash.
func scaleKey(i int) string { return fmt.Sprintf("%064x", i) }

// shortKey is the i-th 13-character key ("key-" and 9 digits), the size
// of the keys master_scale.py wrote before it took block hashes.
func shortKey(i int) string { return fmt.Sprintf("key-%09d", i) }

// scaleWriter is the client id of the scale benchmarks' writer, a UUID as
// the store client's.
const scaleWriter = "9f3c2a44-5d1e-4b7a-8c0d-2e6f1a9b3c7d"

// fillTable returns a state (cfg changed by mut) holding n finished
// objects of 64 bytes under scaleKey keys, every tenth soft-pinned, on
// one segment, the i-th written at epoch + i µs. Each put gets its key and
// client id in strings of its own, as decoded from a request.
func fillTable(b *testing.B, mut func(*Config), n int) *State {
	return fillTableKeys(b, mut, n, scaleKey)
}

// fillTableKeys is fillTable with the i-th key key(i).
func fillTableKeys(b *testing.B, mut func(*Config), n int, key func(int) string) *State {
	b.Helper()
	cfg := DefaultConfig()
	if mut != nil {
		mut(&cfg)
	}
	st, err := NewState(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if code := st.MountSegment("c1", Segment{ID: "s", Name: "host-s", Base: 1 << 20, Size: 1 << 40, TEEndpoint: "te-s"}, epoch); code != kvstore.OK {
		b.Fatal(code)
	}
	if _, code := st.Ping(scaleWriter, 0, epoch); code != kvstore.OK { // a client heartbeats before it writes
		b.Fatal(code)
	}
	ttl := time.Hour
	plain := ReplicateConfig{ReplicaNum: 1}
	pinned := ReplicateConfig{ReplicaNum: 1, SoftPin: SoftPinEnable, SoftPinTTL: &ttl}
	for i := range n {
		rc := plain
		if i%10 == 0 {
			rc = pinned
		}
		key, w, now := key(i), strings.Clone(scaleWriter), epoch.Add(time.Duration(i)*time.Microsecond)
		if _, code := st.PutStart(w, key, 64, rc, now); code != kvstore.OK {
			b.Fatal(code)
		}
		if code := st.PutEnd(w, key, nil, now); code != kvstore.OK {
			b.Fatal(code)
		}
		if cfg.FS.Enabled() {
			st.PutEndDisk(w, key, now)
		}
	}
	return st
}

// BenchmarkStats is one /metrics scrape's Stats over scaleObjects objects:
// it costs nothing per object (it walked the table for the soft-pin count
// under the master lock before).
func BenchmarkStats(b *testing.B) {
	st := fillTable(b, nil, scaleObjects(b))
	b.ResetTimer()
	for range b.N {
		if st.Stats().KeyCount == 0 {
			b.Fatal("empty table")
		}
	}
}

// BenchmarkReleaseExpiredIdleFS is one background release pass with the
// shared-file-system tier on, over scaleObjects objects whose DISK
// replicas are all published: it costs nothing per object (it walked the
// table every second before).
func BenchmarkReleaseExpiredIdleFS(b *testing.B) {
	st := fillTable(b, func(c *Config) { c.FS.RootDir = "/shared" }, scaleObjects(b))
	b.ResetTimer()
	for i := range b.N {
		st.ReleaseExpired(epoch.Add(time.Duration(i) * time.Second))
	}
}

// heapInuse is the live heap after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// BenchmarkObjectBytes is the master's heap per object (key included)
// with 10^5 and 10^6 objects in the table, under 64-character keys and
// 13-character ones: bytes/object. With $MC_OBJECT_BYTES_PROFILE set it
// writes a heap profile to $MC_OBJECT_BYTES_PROFILE-<key>-<n> while
// each table is full (go tool pprof -sample_index=inuse_space).
func BenchmarkObjectBytes(b *testing.B) {
	keys := []struct {
		name string
		key  func(int) string
	}{{"key64", scaleKey}, {"key13", shortKey}}
	for _, k := range keys {
		for _, n := range []int{100_000, 1_000_000} {
			b.Run(k.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				for range b.N {
					before := heapInuse()
					st := fillTableKeys(b, nil, n, k.key)
					after := heapInuse()
					b.ReportMetric(float64(after-before)/float64(n), "bytes/object")
					if path := os.Getenv("MC_OBJECT_BYTES_PROFILE"); path != "" {
						writeHeapProfile(b, fmt.Sprintf("%s-%s-%d", path, k.name, n))
					}
					runtime.KeepAlive(st)
				}
			})
		}
	}
}

// writeHeapProfile writes the heap profile as of the last collection to
// path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkExistKey is ExistKey on random keys of a table of scaleObjects
// objects: the table lookup that is_exist and get_replica_list start with,
// over more keys than the caches hold.
func BenchmarkExistKey(b *testing.B) {
	n := scaleObjects(b)
	st := fillTable(b, nil, n)
	rng := rand.New(rand.NewSource(1))
	keys := make([]string, 1<<18)
	for i := range keys {
		keys[i] = scaleKey(rng.Intn(n))
	}
	now := epoch.Add(time.Hour)
	b.ResetTimer()
	for i := range b.N {
		if ok, _ := st.ExistKey(keys[i%len(keys)], now); !ok {
			b.Fatal("a written key is missing")
		}
	}
}

// BenchmarkEvictRound is one eviction round over scaleObjects objects,
// every one a candidate (the high watermark is 0): it takes the
// EvictionRatio (5%) oldest. The evicted objects are written again
// between rounds, off the clock; cpu_s/op is the process's CPU time in
// the rounds (the host is shared).
func BenchmarkEvictRound(b *testing.B) {
	st := fillTable(b, func(c *Config) { c.EvictionHighWatermarkRatio = 0 }, scaleObjects(b))
	rc := ReplicateConfig{ReplicaNum: 1}
	now := epoch.Add(time.Hour)
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		c0 := cpuTime(b)
		res := st.Evict(now)
		cpu += cpuTime(b) - c0
		if len(res.Evicted) == 0 {
			b.Fatal("nothing evicted")
		}
		b.StopTimer()
		for _, k := range res.Evicted {
			if _, code := st.PutStart(scaleWriter, k, 64, rc, now); code != kvstore.OK {
				b.Fatal(code)
			}
			st.PutEnd(scaleWriter, k, nil, now)
		}
		now = now.Add(time.Second)
		b.StartTimer()
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu_s/op")
}
