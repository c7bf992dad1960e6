package replication

import (
	"testing"
	"time"
)

func TestOplogBatchRoundTrip(t *testing.T) {
	es := []Entry{
		{Kind: KindRPC, N: 7, Now: time.Unix(0, 1234567), Name: "/m/PutStart", MD: map[string]string{"a": "b"}, Payload: []byte{1, 2, 3}},
		{Kind: KindClientTick, N: 8, Now: time.Unix(0, -5)},
	}
	var enc []byte
	for i := range es {
		enc = AppendEntry(enc, &es[i])
	}
	b, err := decodeBatch(EncodeBatch(42, len(es), enc))
	if err != nil || b.seq != 42 || len(b.entries) != 2 {
		t.Fatalf("decode: %+v %v", b, err)
	}
	for i := range es {
		got, want := b.entries[i], es[i]
		if got.Kind != want.Kind || got.N != want.N || !got.Now.Equal(want.Now) || got.Name != want.Name ||
			string(got.Payload) != string(want.Payload) || len(got.MD) != len(want.MD) || got.MD["a"] != want.MD["a"] {
			t.Fatalf("entry %d: got %+v want %+v", i, got, want)
		}
	}
	if _, err := decodeBatch(EncodeBatch(1, 3, enc)); err == nil {
		t.Fatal("a batch claiming more entries than it holds decoded")
	}
	if seq, ok := BatchSeq("p/", BatchKey("p/", 9)); !ok || seq != 9 {
		t.Fatal("BatchSeq(BatchKey(9))")
	}
}

func FuzzDecodeBatch(f *testing.F) {
	e := Entry{Kind: KindRPC, N: 1, Now: time.Unix(5, 0), Name: "x", MD: map[string]string{"k": "v"}, Payload: []byte("p")}
	f.Add(EncodeBatch(1, 1, AppendEntry(nil, &e)))
	f.Add([]byte("MCOL\x01\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeBatch(b)
		if err != nil {
			return
		}
		var enc []byte
		for i := range got.entries {
			enc = AppendEntry(enc, &got.entries[i])
		}
		again, err := decodeBatch(EncodeBatch(got.seq, len(got.entries), enc))
		if err != nil || len(again.entries) != len(got.entries) {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
	})
}
