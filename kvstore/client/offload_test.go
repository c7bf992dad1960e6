package client

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master"
)

// offloadEnv makes the disk tier fast and small for a test.
func offloadEnv(t *testing.T) {
	t.Setenv("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "0.05")
	t.Setenv("MOONCAKE_OFFLOAD_LOCAL_BUFFER_SIZE_BYTES", "8388608")
}

func TestEnableOffloadNeedsAnOffloadMaster(t *testing.T) {
	offloadEnv(t)
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 8<<20, 4<<20)
	if err := c.EnableOffload(t.TempDir()); !errors.Is(err, kvstore.UnableOffload) {
		t.Fatalf("EnableOffload against a master without offload: %v, want UNABLE_OFFLOAD", err)
	}
}

// TestOffloadOnEvictKeepsEveryKeyReadable fills a pool three times over
// with offload on evict: every key reads back, from memory or disk.
func TestOffloadOnEvictKeepsEveryKeyReadable(t *testing.T) {
	offloadEnv(t)
	rpc, meta := startMaster(t, func(c *master.Config) {
		c.Offload.Enable, c.Offload.OnEvict = true, true
		c.EvictionHighWatermarkRatio, c.EvictionRatio = 0.6, 0.3
		c.DefaultLeaseTTL = 2 * time.Second
	})
	dir := t.TempDir() // before the client: cleanups run last first, so it closes before the removal
	holder := newClient(t, rpc, meta, 8<<20, 4<<20)
	if err := holder.EnableOffload(dir); err != nil {
		t.Fatal(err)
	}
	writer := newClient(t, rpc, meta, 0, 4<<20)
	const n, size = 24, 1 << 20
	values := make([][]byte, n)
	for i := range values {
		values[i] = fillPattern(buf(t, size), byte(i))
		key := string(rune('a' + i))
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := writer.Put(key, part(values[i]), DefaultReplicateConfig(), PutOptions{})
			if err == nil {
				break
			}
			if !errors.Is(err, kvstore.NoAvailableHandle) || time.Now().After(deadline) {
				t.Fatalf("put %s: %v", key, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range values {
		dst := buf(t, size)
		key := string(rune('a' + i))
		if r := writer.GetInto(key, part(dst), false); r.Err != nil || !bytes.Equal(dst, values[i]) {
			t.Fatalf("get %s: %+v equal=%v", key, r, bytes.Equal(dst, values[i]))
		}
	}
	if holder.OffloadRPCReadCount() == 0 {
		t.Fatal("no read was served from disk although the pool was filled three times over")
	}
	keys, held := holder.disk.tier.Load().store.usage()
	if keys == 0 || held != uint64(keys)*size {
		t.Fatalf("disk usage %d keys, %d bytes", keys, held)
	}
}
