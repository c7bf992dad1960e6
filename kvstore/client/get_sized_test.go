package client

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore"
)

// TestBatchGetSizedMatchesBatchGet: the one-allocation copying get hands
// every found object's size to its allocator in one call (-1 for missing
// keys), reads what BatchGet reads (sizes around the staging threshold,
// larger than the local buffer, a key twice), and fails a key it was given
// no memory for with InternalError while the others are read.
func TestBatchGetSizedMatchesBatchGet(t *testing.T) {
	rpc, meta := startMaster(t, nil)
	c := newClient(t, rpc, meta, 64<<20, 4<<20)
	sizes := []int{1, 4096, minDirectCopyingRead - 1, minDirectCopyingRead, 5<<20 + 7}
	var keys []string
	want := map[string][]byte{}
	for i, n := range sizes {
		k := fmt.Sprintf("sized-%d", n)
		want[k] = fillPattern(buf(t, n), byte(i+1))
		if err := c.Put(k, part(want[k]), DefaultReplicateConfig(), PutOptions{}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		keys = append(keys, k)
	}
	asked := append([]string{"missing-a"}, keys...)
	asked = append(asked, keys[1], "missing-b")

	calls := 0
	got := make([][]byte, len(asked))
	rs := c.BatchGetSized(asked, func(sz []int64, dests [][]Part) {
		calls++
		if len(sz) != len(asked) || len(dests) != len(asked) {
			t.Fatalf("allocator got %d sizes and %d destinations for %d keys", len(sz), len(dests), len(asked))
		}
		for i, n := range sz {
			wantSize := int64(-1)
			if w, ok := want[asked[i]]; ok {
				wantSize = int64(len(w))
			}
			if n != wantSize {
				t.Errorf("size of %s: %d, want %d", asked[i], n, wantSize)
			}
			if n >= 0 {
				got[i] = buf(t, int(n))
				dests[i] = []Part{{gpu.AddrOf(got[i]), uint64(n)}}
			}
		}
	})
	if calls != 1 {
		t.Fatalf("allocator called %d times, want once", calls)
	}
	ref := make([][]byte, len(asked))
	refRs := c.BatchGet(asked, func(i int, n uint64) ([]Part, error) {
		ref[i] = buf(t, int(n))
		return []Part{{gpu.AddrOf(ref[i]), n}}, nil
	})
	for i, r := range rs {
		if kvstore.CodeOf(r.Err) != kvstore.CodeOf(refRs[i].Err) {
			t.Errorf("%s: %v, BatchGet: %v", asked[i], r.Err, refRs[i].Err)
		}
		if r.Err == nil && (r.Size != uint64(len(want[asked[i]])) || !bytes.Equal(got[i], want[asked[i]]) || !bytes.Equal(got[i], ref[i])) {
			t.Errorf("%s: read %d bytes that differ from what was put", asked[i], r.Size)
		}
		if w, ok := want[asked[i]]; !ok && !errors.Is(r.Err, kvstore.ObjectNotFound) {
			t.Errorf("%s: %v, want OBJECT_NOT_FOUND", asked[i], r.Err)
		} else if ok && r.Err != nil {
			t.Errorf("%s (%d bytes): %v", asked[i], len(w), r.Err)
		}
	}

	// No memory for the second key: it alone fails.
	two := []string{keys[0], keys[1]}
	var first []byte
	rs = c.BatchGetSized(two, func(sz []int64, dests [][]Part) {
		first = buf(t, int(sz[0]))
		dests[0] = []Part{{gpu.AddrOf(first), uint64(sz[0])}}
	})
	if rs[0].Err != nil || !bytes.Equal(first, want[keys[0]]) {
		t.Errorf("the key given memory: %v", rs[0].Err)
	}
	if !errors.Is(rs[1].Err, kvstore.InternalError) {
		t.Errorf("the key given none: %v, want INTERNAL_ERROR", rs[1].Err)
	}
}
