package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// measureMemcpy copies block-sized pieces from one footprint-sized buffer
// into another on threads goroutines, each cycling through its own share of
// both buffers, for d.
func measureMemcpy(block, threads, footprint int, d time.Duration) (result, error) {
	src, dst := newTouched(footprint, 1), newTouched(footprint, 2)
	share := footprint / threads / block * block
	var total atomic.Uint64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for t := range threads {
		s, dd := src[t*share:(t+1)*share], dst[t*share:(t+1)*share]
		wg.Go(func() {
			var n uint64
			for off := 0; ; off += block {
				if off+block > len(s) {
					off = 0
				}
				copy(dd[off:off+block], s[off:off+block])
				n += uint64(block)
				if time.Now().After(deadline) {
					break
				}
			}
			total.Add(n)
		})
	}
	wg.Wait()
	r := result{Kind: "memcpy", BlockSize: block, Threads: threads, Footprint: footprint}
	r.finish(total.Load(), time.Since(start))
	return r, nil
}
