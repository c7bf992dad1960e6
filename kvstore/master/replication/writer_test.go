package replication

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mooncake-go/mooncake/internal/testutil"
)

// TestOplogWriterIsFenced writes batches under an election key, then
// replaces the key (another leader): the next batch is refused, and so is
// every later one, and onFail runs.
func TestOplogWriterIsFenced(t *testing.T) {
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	put, err := cli.Put(ctx, "view", "a")
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	w := newOplogWriter(cli, "log/", "view", put.Header.Revision, 0, 10, 4, time.Second, func(err error) { failed <- err })
	defer w.close()
	// onDurable runs once a batch is in etcd, never for a fenced one (the
	// KV events of a change hang on it).
	var durable atomic.Int32
	for i := 0; i < 3; i++ {
		e := &Entry{Kind: KindClientTick, N: uint64(i), Now: time.Now(), OnDurable: func() { durable.Add(1) }}
		if err := w.append(e).Wait(ctx); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if got := durable.Load(); got != int32(i+1) {
			t.Fatalf("batch %d durable, %d onDurable ran", i, got)
		}
	}
	if _, err := cli.Delete(ctx, "view"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "view", "b"); err != nil {
		t.Fatal(err)
	}
	if err := w.append(&Entry{Kind: KindClientTick, N: 3, Now: time.Now(), OnDurable: func() { durable.Add(1) }}).Wait(ctx); !errors.Is(err, errFenced) {
		t.Fatalf("batch after the key changed hands: %v, want errFenced", err)
	}
	if got := durable.Load(); got != 3 {
		t.Fatalf("a fenced batch ran onDurable (%d calls, want 3)", got)
	}
	if err := <-failed; !errors.Is(err, errFenced) {
		t.Fatalf("onFail: %v", err)
	}
	if err := w.append(&Entry{Kind: KindClientTick, N: 4, Now: time.Now()}).Wait(ctx); !errors.Is(err, errFenced) {
		t.Fatalf("batch after the failure: %v", err)
	}
	resp, err := cli.Get(ctx, "log/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("log: %v", err)
	}
	if n := len(resp.Kvs); n > 3 {
		t.Fatalf("%d batches in etcd, want at most 3 (a fenced writer appended)", n)
	}
}

// TestOplogPipelinedWriterFencedMidStream runs many appenders against a
// writer with batches in flight and takes the election key away in the
// middle, as a successor does after the leader's kill -9: the log in
// etcd up to its first gap holds every entry at most once and in order
// and every acknowledged entry; the acknowledged entries are a prefix of
// it whose onDurable ran in log order; and the successor's first batch
// removes the orphans after the gap.
func TestOplogPipelinedWriterFencedMidStream(t *testing.T) {
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	view, err := cli.Put(ctx, "view", "a")
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	w := newOplogWriter(cli, "log/", "view", view.Header.Revision, 0, 3, 8, 5*time.Second, func(err error) { failed <- err })
	defer w.close()

	const appenders, each = 16, 60
	var order sync.Mutex // the replication order lock: numbers go in log order
	var next uint64
	var durableMu sync.Mutex
	var durable []uint64 // entry numbers in the order onDurable ran
	acked := make([]atomic.Bool, appenders*each)
	var wg sync.WaitGroup
	var fenceOnce sync.Once
	var appended atomic.Int64
	for a := 0; a < appenders; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				order.Lock()
				n := next
				next++
				e := &Entry{Kind: KindClientTick, N: n, Now: time.Now(), OnDurable: func() {
					durableMu.Lock()
					durable = append(durable, n)
					durableMu.Unlock()
				}}
				t := w.append(e)
				order.Unlock()
				if appended.Add(1) == appenders*each/2 {
					// A successor takes the key while batches are in flight.
					fenceOnce.Do(func() {
						if _, err := cli.Delete(ctx, "view"); err == nil {
							_, _ = cli.Put(ctx, "view", "b")
						}
					})
				}
				if t.Wait(ctx) == nil {
					acked[n].Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if err := <-failed; !errors.Is(err, errFenced) {
		t.Fatalf("onFail: %v", err)
	}

	// What a successor applies: the log up to its first gap.
	resp, err := cli.Get(ctx, "log/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var logged []uint64
	var prefixEnd uint64
	for i, kv := range resp.Kvs {
		seq, ok := BatchSeq("log/", string(kv.Key))
		if !ok || seq != uint64(i+1) {
			break // a gap: the batches after it are orphans
		}
		prefixEnd = seq
		b, err := decodeBatch(kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.entries {
			logged = append(logged, e.N)
		}
	}
	for i, n := range logged {
		if n != uint64(i) {
			t.Fatalf("entry %d of the log is number %d: out of order or twice", i, n)
		}
	}
	nAcked := 0
	for n := range acked {
		if acked[n].Load() {
			nAcked++
			if n >= len(logged) {
				t.Fatalf("entry %d was acknowledged but is not in the log up to its first gap (%d entries)", n, len(logged))
			}
		}
	}
	for n := 0; n < nAcked; n++ {
		if !acked[n].Load() {
			t.Fatalf("entry %d not acknowledged but a later one was: acknowledged out of order", n)
		}
	}
	if nAcked == 0 || nAcked == appenders*each {
		t.Fatalf("%d of %d entries acknowledged: the key never changed hands mid-stream", nAcked, appenders*each)
	}
	durableMu.Lock()
	defer durableMu.Unlock()
	if want := logged[:nAcked]; !reflect.DeepEqual(durable, want) {
		t.Fatalf("onDurable ran for %v, want the acknowledged entries %v in order", durable, want)
	}
	// The successor's first batch lands at the gap and clears the rest.
	view2, err := cli.Get(ctx, "view")
	if err != nil || len(view2.Kvs) != 1 {
		t.Fatalf("view key: %v %v", view2, err)
	}
	w2 := newOplogWriter(cli, "log/", "view", view2.Kvs[0].CreateRevision, prefixEnd, 10, 8, 5*time.Second, func(error) {})
	defer w2.close()
	if err := w2.append(&Entry{Kind: KindClientTick, N: uint64(len(logged)), Now: time.Now()}).Wait(ctx); err != nil {
		t.Fatalf("the successor's first batch: %v", err)
	}
	after, err := cli.Get(ctx, "log/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if got := uint64(len(after.Kvs)); got != prefixEnd+1 {
		t.Fatalf("%d batches after the successor's first, want %d: orphans left", got, prefixEnd+1)
	}
}

// TestWriterDoesNotRetryABatchEtcdRefusesAsTooLarge: with an etcd that
// takes smaller requests than a batch, the batch fails at once with an
// error naming the cause, instead of being retried until the retry
// timeout.
func TestWriterDoesNotRetryABatchEtcdRefusesAsTooLarge(t *testing.T) {
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t, "--max-request-bytes=65536"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	view, err := cli.Put(ctx, "view", "a")
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	// Retried, the batch would keep failing for a minute and a half, well
	// past ctx (close waits for it).
	w := newOplogWriter(cli, "log/", "view", view.Header.Revision, 0, 100, 4, 90*time.Second, func(err error) { failed <- err })
	defer w.close()
	err = w.append(&Entry{Kind: KindRPC, N: 0, Now: time.Now(), Name: "/m/M", Payload: make([]byte, 100_000)}).Wait(ctx)
	if !errors.Is(err, errFenced) || !strings.Contains(err.Error(), "larger than etcd accepts") {
		t.Fatalf("a batch over etcd's request limit: %v", err)
	}
	if err := <-failed; !strings.Contains(err.Error(), "larger than etcd accepts") {
		t.Fatalf("onFail: %v", err)
	}
}

// TestWriterCutEndsTheBatch: cut names the batch the entries so far end
// in, the next entry goes to a later batch, and a failed writer refuses
// to cut (its state holds changes that never became durable).
func TestWriterCutEndsTheBatch(t *testing.T) {
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	view, err := cli.Put(ctx, "view", "a")
	if err != nil {
		t.Fatal(err)
	}
	w := newOplogWriter(cli, "log/", "view", view.Header.Revision, 0, 100, 4, time.Second, func(error) {})
	defer w.close()
	first := w.append(&Entry{Kind: KindClientTick, N: 0, Now: time.Now()})
	seq, ticket, err := w.cut()
	if err != nil || ticket == nil {
		t.Fatalf("cut with an entry pending: %d %v %v", seq, ticket, err)
	}
	if err := ticket.Wait(ctx); err != nil || first.Wait(ctx) != nil {
		t.Fatalf("batch: %v", err)
	}
	if got := w.appliedSeqForTest(); got != seq {
		t.Fatalf("cut said batch %d, the writer made it %d", seq, got)
	}
	next := w.append(&Entry{Kind: KindClientTick, N: 1, Now: time.Now()})
	if next == ticket {
		t.Fatal("an entry after the cut joined the cut batch")
	}
	if err := next.Wait(ctx); err != nil || w.appliedSeqForTest() != seq+1 {
		t.Fatalf("entry after the cut: %v, batch %d", err, w.appliedSeqForTest())
	}
	if s, tk, err := w.cut(); err != nil || tk != nil || s != seq+1 {
		t.Fatalf("cut with everything durable: %d %v %v", s, tk, err)
	}
	if _, err := cli.Delete(ctx, "view"); err != nil {
		t.Fatal(err)
	}
	if w.append(&Entry{Kind: KindClientTick, N: 2, Now: time.Now()}).Wait(ctx) == nil {
		t.Fatal("a batch after the view key went was written")
	}
	if _, _, err := w.cut(); !errors.Is(err, errFenced) {
		t.Fatalf("cut of a failed writer: %v, want errFenced", err)
	}
}

func (w *oplogWriter) appliedSeqForTest() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq
}

// TestWriterWaitsForTheCallersItJustAnswered: a free slot does not take
// the open batch while fewer entries are in it than the writer expects
// back (the callers of the batch that settled last), until the linger
// ends; the entries that come back share one batch.
func TestWriterWaitsForTheCallersItJustAnswered(t *testing.T) {
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	view, err := cli.Put(ctx, "view", "a")
	if err != nil {
		t.Fatal(err)
	}
	w := newOplogWriter(cli, "log/", "view", view.Header.Revision, 0, 100, 1, time.Second, func(error) {})
	defer w.close()
	// Three callers share a batch; once it settles the writer expects all
	// three back.
	var three [3]*Ticket
	w.mu.Lock() // queued together, as callers that arrived during a flight
	w.want, w.lingerUntil = 3, time.Now().Add(time.Hour)
	w.mu.Unlock()
	for i := range three {
		three[i] = w.append(&Entry{Kind: KindClientTick, N: uint64(i), Now: time.Now()})
	}
	if three[0] != three[1] || three[1] != three[2] {
		t.Fatal("three entries expected together went to different batches")
	}
	if err := three[0].Wait(ctx); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	want := w.want
	w.lingerUntil = time.Now().Add(time.Hour) // the test decides when the wait ends
	w.mu.Unlock()
	if want != 3 {
		t.Fatalf("after a batch of 3 settled the writer expects %d entries back, want 3", want)
	}
	// Two come back: their batch waits for the third.
	a := w.append(&Entry{Kind: KindClientTick, N: 3, Now: time.Now()})
	b := w.append(&Entry{Kind: KindClientTick, N: 4, Now: time.Now()})
	time.Sleep(200 * time.Millisecond)
	if got := w.appliedSeqForTest(); got != 1 {
		t.Fatalf("batch %d durable before the callers expected back came: want 1", got)
	}
	c := w.append(&Entry{Kind: KindClientTick, N: 5, Now: time.Now()})
	if a != b || b != c {
		t.Fatal("the callers that came back went to different batches")
	}
	if err := c.Wait(ctx); err != nil || w.appliedSeqForTest() != 2 {
		t.Fatalf("the returning batch: %v, batch %d durable, want 2", err, w.appliedSeqForTest())
	}
	// A caller that never comes back holds the others up only until the
	// linger ends.
	w.mu.Lock()
	w.want, w.lingerUntil = 5, time.Now().Add(100*time.Millisecond)
	w.mu.Unlock()
	if err := w.append(&Entry{Kind: KindClientTick, N: 6, Now: time.Now()}).Wait(ctx); err != nil || w.appliedSeqForTest() != 3 {
		t.Fatalf("a batch short of its callers after the linger: %v, batch %d durable, want 3", err, w.appliedSeqForTest())
	}
}
