package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mooncake-go/mooncake/internal/testutil"
)

// TestOplogOrphansAfterAGapAreNeverApplied: a leader with several batches
// in flight can die with a later batch in etcd and an earlier one not (a
// gap). A replica applies the log up to the gap only, whether it reads
// it or watches it; the next leader's first batch fills the gap and
// deletes the orphans after it, and the replica goes on with the new
// batches, never the orphans.
func TestOplogOrphansAfterAGapAreNeverApplied(t *testing.T) {
	ep := testutil.StartEtcd(t)
	cli := testutil.EtcdClient(t, ep)
	ctx := context.Background()
	const prefix = "log/"
	put := func(seq uint64, ns ...uint64) {
		t.Helper()
		var enc []byte
		for _, n := range ns {
			enc = AppendEntry(enc, &Entry{Kind: KindEvictTick, N: n, Now: time.Now()})
		}
		if _, err := cli.Put(ctx, BatchKey(prefix, seq), string(EncodeBatch(seq, len(ns), enc))); err != nil {
			t.Fatal(err)
		}
	}
	// The dead leader's log: batches 1 and 2 acknowledged, 3 lost, 4 and
	// 5 orphans.
	put(1, 0, 1)
	put(2, 2)
	put(4, 10)
	put(5, 11)
	replica := func() *Log {
		l, _ := newTestLog()
		return l
	}
	position := func(l *Log) (uint64, uint64) { return l.position() }
	// A replica that reads the log (a promotion does) stops at the gap.
	next := replica()
	if _, err := next.catchUp(ctx, cli, prefix); err != nil {
		t.Fatalf("catch up over a gap: %v", err)
	}
	if seq, n := position(next); seq != 2 || n != 3 {
		t.Fatalf("after reading the log: batch %d, entry %d; want 2, 3 (nothing past the gap)", seq, n)
	}
	if next.Resets() != 0 {
		t.Fatal("a gap was taken for the log's compaction")
	}
	// A standby that follows the log stops there too.
	standby := replica()
	stop := standby.StartTail(cli, prefix, time.Hour)
	defer stop()
	testutil.WaitUntil(t, 10*time.Second, "the standby to apply batch 2", func() bool {
		seq, _ := position(standby)
		return seq == 2
	})

	// The next leader writes at the gap; the orphans go.
	view, err := cli.Put(ctx, "view", "next")
	if err != nil {
		t.Fatal(err)
	}
	w := newOplogWriter(cli, prefix, "view", view.Header.Revision, 2, 100, 4, 5*time.Second, func(error) {})
	defer w.close()
	for n := uint64(3); n < 6; n++ {
		if err := w.append(&Entry{Kind: KindEvictTick, N: n, Now: time.Now()}).Wait(ctx); err != nil {
			t.Fatalf("entry %d: %v", n, err)
		}
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for i, kv := range resp.Kvs {
		b, err := decodeBatch(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.entries {
			if e.N >= 10 {
				t.Fatalf("orphan entry %d still in batch %s", e.N, kv.Key)
			}
		}
		if seq, _ := BatchSeq(prefix, string(kv.Key)); seq != uint64(i+1) {
			t.Fatalf("batch %d at position %d", seq, i)
		}
	}
	wantSeq := w.appliedSeqForTest()
	testutil.WaitUntil(t, 10*time.Second, "the standby to apply the new leader's batches", func() bool {
		seq, _ := position(standby)
		return seq == wantSeq
	})
	if _, n := position(standby); n != 6 {
		t.Fatalf("standby at entry %d, want 6: it applied an orphan or missed a batch", n)
	}
}

// TestLargeEntryGoesInPieces: an entry larger than MaxEntryBytes is
// written as pieces, no batch passes MaxBatchBytes, and a replica
// applying the batches joins them into the very entry.
func TestLargeEntryGoesInPieces(t *testing.T) {
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	view, err := cli.Put(ctx, "view", "a")
	if err != nil {
		t.Fatal(err)
	}
	w := newOplogWriter(cli, "log/", "view", view.Header.Revision, 0, 100, 4, 5*time.Second, func(error) {})
	defer w.close()
	var durable atomic.Int32
	small := &Entry{Kind: KindClientTick, N: 0, Now: time.Unix(1, 0)}
	big := &Entry{Kind: KindRPC, N: 1, Now: time.Unix(2, 0), Name: "/m/Big", MD: map[string]string{"k": "v"},
		Payload: bytes.Repeat([]byte("0123456789"), 250_000), OnDurable: func() { durable.Add(1) }}
	after := &Entry{Kind: KindClientTick, N: 2, Now: time.Unix(3, 0)}
	w.append(small)
	if err := w.append(big).Wait(ctx); err != nil {
		t.Fatalf("a 2.5 MB entry: %v", err)
	}
	if err := w.append(after).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if durable.Load() != 1 {
		t.Fatalf("onDurable of the entry in pieces ran %d times", durable.Load())
	}
	resp, err := cli.Get(ctx, "log/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) < 3 { // 2.5 MB in batches of at most 1 MiB
		t.Fatalf("%d batches for 2.5 MB", len(resp.Kvs))
	}
	r, sm := newTestLog()
	var seen []Entry
	for _, kv := range resp.Kvs {
		if len(kv.Value) > MaxBatchBytes+64 {
			t.Fatalf("batch %s of %d bytes", kv.Key, len(kv.Value))
		}
		b, err := decodeBatch(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.entries {
			if e.Kind == KindRPC {
				t.Fatal("the large entry was written whole")
			}
		}
		if err := r.applyBatch("log/", kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, b.entries...)
	}
	if r.nextN != 3 || r.pieces != nil {
		t.Fatalf("after the log: next entry %d, %d bytes of pieces held; want 3 and none", r.nextN, len(r.pieces))
	}
	var joined []byte
	for _, e := range seen {
		if e.Kind == KindPiece || e.Kind == KindLastPiece {
			joined = append(joined, e.Payload...)
		}
	}
	got, err := decodeEntry(joined)
	if err != nil || got.Kind != big.Kind || got.N != big.N || !got.Now.Equal(big.Now) || got.Name != big.Name ||
		got.MD["k"] != "v" || !bytes.Equal(got.Payload, big.Payload) {
		t.Fatalf("joined pieces: %v %+v", err, got.Name)
	}
	applied := sm.entries()
	if len(applied) != 3 || applied[1].Name != big.Name || !bytes.Equal(applied[1].Payload, big.Payload) {
		t.Fatalf("the replica applied %d entries, not the large one whole between the others", len(applied))
	}
}

// TestPiecesOfAnEntryNeverFinishedAreDropped: a leader that died between
// an entry's pieces left them without their last one; the next leader's
// entries (numbered from that entry on) apply, and its own entry in
// pieces joins without the orphans.
func TestPiecesOfAnEntryNeverFinishedAreDropped(t *testing.T) {
	r, sm := newTestLog()
	now := time.Unix(10, 0)
	quota := func(n uint64, tenant string, q uint64) *Entry {
		return &Entry{Kind: KindTenantQuotaSet, N: n, Now: now, Name: tenant, Payload: binary.AppendUvarint(nil, q)}
	}
	orphan := pieces(quota(0, "lost", 1), bytes.Repeat([]byte{1}, 2*pieceBytes))
	big := quota(1, strings.Repeat("t", 2*pieceBytes), 7)
	var fromNext []*Entry
	fromNext = append(fromNext, &Entry{Kind: KindPromote, N: 0, Now: now})
	fromNext = append(fromNext, pieces(big, AppendEntry(nil, big))...)
	apply := func(seq uint64, es ...*Entry) {
		t.Helper()
		var enc []byte
		for _, e := range es {
			enc = AppendEntry(enc, e)
		}
		if err := r.applyBatch("log/", []byte(BatchKey("log/", seq)), EncodeBatch(seq, len(es), enc)); err != nil {
			t.Fatalf("batch %d: %v", seq, err)
		}
	}
	apply(1, orphan[0]) // the old leader's last batch
	apply(2, fromNext[0])
	apply(3, fromNext[1:]...)
	if r.nextN != 2 || r.pieces != nil {
		t.Fatalf("next entry %d, %d bytes of pieces held; want 2 and none", r.nextN, len(r.pieces))
	}
	applied := sm.entries()
	if len(applied) != 2 || applied[0].Kind != KindPromote || applied[1].Name != big.Name ||
		!bytes.Equal(applied[1].Payload, big.Payload) {
		t.Fatalf("applied %d entries; want the promotion, then the entry in pieces whole", len(applied))
	}
}
