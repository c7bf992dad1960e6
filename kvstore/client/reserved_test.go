package client

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore/master"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
)

// requests returns the master's count of op.
func requests(svc *master.Service, op string) uint64 { return svc.Server.Stats().Requests[op] }

// mustReadBack reads key through c and fails t unless it holds want.
func mustReadBack(t *testing.T, c *Client, key string, want []byte) {
	t.Helper()
	dst := buf(t, len(want))
	r := c.GetInto(key, part(dst), true)
	if r.Err != nil || r.Size != uint64(len(want)) || !bytes.Equal(dst, want) {
		t.Fatalf("get %s: %+v equal=%v", key, r, bytes.Equal(dst, want))
	}
}

// TestSmallPutsCommitInOneCall: small default-placed puts (single and
// batch, copying and zero-copy) go through a reserved block with one
// master call each; a larger one, an upsert and a placed one take the
// two-phase path; everything reads back from another client.
func TestSmallPutsCommitInOneCall(t *testing.T) {
	svc := startMasterService(t, nil)
	rpc, meta := svc.RPCAddr(), "http://"+svc.MetadataAddr()+"/metadata"
	a := newClient(t, rpc, meta, 64<<20, 8<<20)
	b := newClient(t, rpc, meta, 64<<20, 8<<20)
	var want [][]byte
	for i := range 40 {
		src := fillPattern(buf(t, 1+i*97), byte(i))
		if err := a.Put(fmt.Sprint("s", i), part(src), DefaultReplicateConfig(), PutOptions{ZeroCopy: i%2 == 0}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		want = append(want, src)
	}
	keys := []string{"b0", "b1", "b2"}
	var parts [][]Part
	for i := range keys {
		src := fillPattern(buf(t, 4096), byte(100+i))
		parts = append(parts, part(src))
		want = append(want, src)
	}
	for i, err := range a.BatchPut(keys, parts, DefaultReplicateConfig(), PutOptions{}) {
		if err != nil {
			t.Fatalf("batch put %d: %v", i, err)
		}
	}
	if n := requests(svc, "put_start"); n != 0 {
		t.Fatalf("small puts took %d put starts; want 0", n)
	}
	if n := requests(svc, "put_commit"); n != 43 {
		t.Fatalf("put_commit = %d; want 43", n)
	}
	for i := range 40 {
		mustReadBack(t, b, fmt.Sprint("s", i), want[i])
	}
	for i, k := range keys {
		mustReadBack(t, b, k, want[40+i])
	}

	big := fillPattern(buf(t, reservedObjectMax+1), 7)
	if err := a.Put("big", part(big), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	up := fillPattern(buf(t, 100), 8)
	if err := a.Put("s0", part(up), DefaultReplicateConfig(), PutOptions{Upsert: true}); err != nil {
		t.Fatal(err)
	}
	placed := DefaultReplicateConfig()
	placed.ReplicaNum = 2
	if err := a.Put("two", part(up), placed, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := requests(svc, "put_start") + requests(svc, "upsert_start"); n != 3 {
		t.Fatalf("two-phase starts = %d; want 3 (large, upsert, two replicas)", n)
	}
	mustReadBack(t, b, "big", big)
	mustReadBack(t, b, "s0", up)
	mustReadBack(t, b, "two", up)

	// A plain put of an existing key succeeds without overwriting.
	if err := a.Put("s1", part(up), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatalf("put of an existing key: %v", err)
	}
	mustReadBack(t, b, "s1", want[1])

	// A batch mixing a large object stays two-phase whole.
	before := requests(svc, "put_start")
	for i, err := range a.BatchPut([]string{"m0", "m1"}, [][]Part{part(up), part(big)}, DefaultReplicateConfig(), PutOptions{}) {
		if err != nil {
			t.Fatalf("mixed batch %d: %v", i, err)
		}
	}
	if n := requests(svc, "put_start") - before; n != 2 {
		t.Fatalf("mixed batch took %d put starts; want 2", n)
	}
	mustReadBack(t, b, "m0", up)
	mustReadBack(t, b, "m1", big)
}

// TestTwoPhasePutSwitch: MC_STORE_TWO_PHASE_PUT=1 sends every put through
// put start and put end.
func TestTwoPhasePutSwitch(t *testing.T) {
	t.Setenv("MC_STORE_TWO_PHASE_PUT", "1")
	svc := startMasterService(t, nil)
	c := newClient(t, svc.RPCAddr(), "http://"+svc.MetadataAddr()+"/metadata", 16<<20, 4<<20)
	src := fillPattern(buf(t, 4096), 1)
	if err := c.Put("k", part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if requests(svc, "put_start") != 1 || requests(svc, "put_commit") != 0 || requests(svc, "reserve") != 0 {
		t.Fatalf("requests %v", svc.Server.Stats().Requests)
	}
	mustReadBack(t, c, "k", src)
}

// TestReservedPutsConcurrent: many goroutines put objects of random sizes,
// alone and in batches, through shared blocks; every object reads back
// whole, so no two were given overlapping space.
func TestReservedPutsConcurrent(t *testing.T) {
	svc := startMasterService(t, nil)
	rpc, meta := svc.RPCAddr(), "http://"+svc.MetadataAddr()+"/metadata"
	a := newClient(t, rpc, meta, 64<<20, 16<<20)
	b := newClient(t, rpc, meta, 64<<20, 8<<20)
	const workers, each = 6, 60
	srcs := make([][][]byte, workers)
	for w := range workers {
		rng := rand.New(rand.NewSource(int64(w)))
		for range each {
			srcs[w] = append(srcs[w], fillPattern(buf(t, 1+rng.Intn(9000)), byte(rng.Intn(256))))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i += 3 {
				keys := []string{fmt.Sprint(w, "/", i), fmt.Sprint(w, "/", i+1), fmt.Sprint(w, "/", i+2)}
				if i%2 == 0 {
					for _, err := range a.BatchPut(keys, [][]Part{part(srcs[w][i]), part(srcs[w][i+1]), part(srcs[w][i+2])}, DefaultReplicateConfig(), PutOptions{}) {
						errs <- err
					}
					continue
				}
				for j, k := range keys {
					errs <- a.Put(k, part(srcs[w][i+j]), DefaultReplicateConfig(), PutOptions{ZeroCopy: j == 1})
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for w := range workers {
		for i := range each {
			mustReadBack(t, b, fmt.Sprint(w, "/", i), srcs[w][i])
		}
	}
	if requests(svc, "put_commit") == 0 {
		t.Fatal("no put went through a block")
	}
}

// TestReservedPutAfterBlockGone: a block the master dropped (its segment
// left ACTIVE) is noticed at the next commit, which is then put the
// two-phase way; the put after that gets a new block.
func TestReservedPutAfterBlockGone(t *testing.T) {
	svc := startMasterService(t, nil)
	c := newClient(t, svc.RPCAddr(), "http://"+svc.MetadataAddr()+"/metadata", 16<<20, 4<<20)
	one := fillPattern(buf(t, 4096), 1)
	if err := c.Put("one", part(one), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ids := c.SegmentIDs()
	if err := c.SetSegmentMode(ids, pb.SegmentMode_SEGMENT_STANDBY); err != nil {
		t.Fatal(err)
	}
	if err := c.SetSegmentMode(ids, pb.SegmentMode_SEGMENT_ACTIVE); err != nil {
		t.Fatal(err)
	}
	two := fillPattern(buf(t, 4096), 2)
	if err := c.Put("two", part(two), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := requests(svc, "put_start"); n != 1 {
		t.Fatalf("put_start = %d; want 1 (the retry after the gone block)", n)
	}
	three := fillPattern(buf(t, 4096), 3)
	if err := c.Put("three", part(three), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	st := svc.Server.Stats()
	if st.Requests["put_start"] != 1 || st.Requests["put_commit"] != 3 || st.Failures["put_commit"] != 1 || st.Requests["reserve"] != 2 {
		t.Fatalf("requests %v failures %v", st.Requests, st.Failures)
	}
	mustReadBack(t, c, "one", one)
	mustReadBack(t, c, "two", two)
	mustReadBack(t, c, "three", three)
}

// TestCloseReleasesBlocks: closing the client gives its blocks back.
func TestCloseReleasesBlocks(t *testing.T) {
	svc := startMasterService(t, nil)
	rpc, meta := svc.RPCAddr(), "http://"+svc.MetadataAddr()+"/metadata"
	storage := newClient(t, rpc, meta, 16<<20, 0)
	c := newClient(t, rpc, meta, 0, 4<<20)
	src := fillPattern(buf(t, 4096), 1)
	if err := c.Put("k", part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	reserved := func() (n int) {
		svc.Server.WithState(func(st *master.State, _ time.Time) { n, _ = st.Reserved() })
		return n
	}
	if reserved() != 1 {
		t.Fatalf("reservations = %d; want 1", reserved())
	}
	c.Close()
	if reserved() != 0 {
		t.Fatalf("reservations after close = %d; want 0", reserved())
	}
	mustReadBack(t, storage, "k", src)
}

// TestReserveBackoff: when the master has no room for a block (a pool
// smaller than one), puts go two-phase, and no block is asked for again
// until the back-off has passed, so a full pool does not cost every put
// an extra round trip.
func TestReserveBackoff(t *testing.T) {
	svc := startMasterService(t, nil)
	c := newClient(t, svc.RPCAddr(), "http://"+svc.MetadataAddr()+"/metadata", 512<<10, 4<<20)
	src := fillPattern(buf(t, 4096), 1)
	for i := range 10 {
		if err := c.Put(fmt.Sprint("k", i), part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	st := svc.Server.Stats()
	if st.Requests["reserve"] != 1 || st.Failures["reserve"] != 1 || st.Requests["put_start"] != 10 {
		t.Fatalf("requests %v failures %v; want one failed reserve and 10 put starts", st.Requests, st.Failures)
	}
	for i := range 10 {
		mustReadBack(t, c, fmt.Sprint("k", i), src)
	}
}
