package client

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/kvstore"
)

// TestCloseWhileCallsRun closes clients while other goroutines put and get
// through them (staged through the local buffer, which Close unmaps).
// Calls running at Close finish first; later ones fail with InvalidParams;
// nothing crashes or hangs. Run under -race; bounded in rounds and time.
func TestCloseWhileCallsRun(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	const workers, n = 3, 64 << 10
	stop := time.Now().Add(20 * time.Second)
	for round := 0; round < 6 && time.Now().Before(stop); round++ {
		c, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: meta, GlobalSegmentSize: 64 << 20, LocalBufferSize: 4 << 20, MasterServerAddr: rpc})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range workers {
			src, dst := buf(t, n), buf(t, n)
			fillPattern(src, byte(w))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					key := fmt.Sprintf("lifecycle/%d/%d/%d", round, w, i)
					err := c.Put(key, []Part{{Addr: gpu.AddrOf(src), Size: n}}, DefaultReplicateConfig(), PutOptions{})
					if err == nil {
						err = c.GetInto(key, []Part{{Addr: gpu.AddrOf(dst), Size: n}}, false).Err
					}
					if err == nil {
						continue
					}
					if !errors.Is(err, kvstore.InvalidParams) || c.Health() != NotInitialized {
						t.Errorf("worker %d: %v (health %d)", w, err, c.Health())
					}
					return
				}
			}()
		}
		time.Sleep(time.Duration(5+round*5) * time.Millisecond)
		c.Close()
		testutil.WaitOrFail(t, &wg, 30*time.Second, fmt.Sprintf("round %d: calls after Close", round))
		if err := c.Put("after-close", []Part{{Addr: 1, Size: 1}}, DefaultReplicateConfig(), PutOptions{}); !errors.Is(err, kvstore.InvalidParams) {
			t.Fatalf("put after Close: %v", err)
		}
	}
}
