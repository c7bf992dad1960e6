package shm_test

import (
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer"
)

// benchBatches runs batches of 128 WRITEs of 64 KiB from 4 goroutines to a
// same-host peer, asynchronously (SubmitTransfer and WaitBatch) or
// synchronously (RunBatch, which copies on the caller's thread).
func benchBatches(b *testing.B, async bool) {
	const block, batch, threads = 64 << 10, 128, 4
	var es [2]*transfer.Engine
	var bufs [2][]byte
	for i := range es {
		e, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.1", MetadataServer: transfer.P2PHandshake, TransferTimeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		a, err := e.AllocateManagedBuffer(threads * batch * block)
		if err != nil {
			b.Fatal(err)
		}
		es[i], bufs[i] = e, gpu.HostBytes(a, threads*batch*block)
	}
	h, err := es[1].CachedSegment(es[0].Name())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(batch * block)
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/threads + 1
	for w := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]transfer.Request, batch)
			for i := range reqs {
				off := (w*batch + i) * block
				reqs[i] = write(h, bufs[1][off:off+block], bufs[0][off:off+block])
			}
			for range per {
				if !async {
					if _, err := es[1].RunBatch(reqs); err != nil {
						b.Error(err)
						return
					}
					continue
				}
				id, err := es[1].AllocateBatch(batch)
				if err == nil {
					err = es[1].SubmitTransfer(id, reqs)
				}
				if err == nil {
					_, err = es[1].WaitBatch(id)
				}
				if err != nil {
					b.Error(err)
					return
				}
				es[1].FreeBatch(id)
			}
		}()
	}
	wg.Wait()
}

func BenchmarkBatchAsync(b *testing.B) { benchBatches(b, true) }
func BenchmarkBatchSync(b *testing.B)  { benchBatches(b, false) }
