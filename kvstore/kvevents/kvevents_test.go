package kvevents

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math"
	"testing"
	"time"
)

func TestMsgpackFormsMatchTheSpec(t *testing.T) {
	for _, tc := range []struct {
		got  []byte
		want string
	}{
		{appendUint(nil, 0), "00"},
		{appendUint(nil, 127), "7f"},
		{appendUint(nil, 128), "cc80"},
		{appendUint(nil, 65535), "cdffff"},
		{appendUint(nil, 1<<32-1), "ceffffffff"},
		{appendUint(nil, math.MaxUint64), "cfffffffffffffffff"},
		{appendInt(nil, -1), "ff"},
		{appendInt(nil, -33), "d0df"},
		{appendInt(nil, -129), "d1ff7f"},
		{appendInt(nil, math.MinInt64), "d38000000000000000"},
		{appendString(nil, "ab"), "a26162"},
		{appendString(nil, string(bytes.Repeat([]byte("x"), 32)))[:2], "d920"},
		{appendNil(nil), "c0"},
		{appendStringOrNil(nil, ""), "c0"},
		{appendArrayHeader(nil, 3), "93"},
		{appendArrayHeader(nil, 16), "dc0010"},
		{appendMapHeader(nil, 15), "8f"},
		{appendMapHeader(nil, 16), "de0010"},
	} {
		if g := hex.EncodeToString(tc.got); g != tc.want {
			t.Errorf("got %s, want %s", g, tc.want)
		}
	}
}

func TestSeqHashParsesDecimalAndHexKeysOnly(t *testing.T) {
	for key, want := range map[string]uint64{"0": 0, "12345": 12345, "0xff": 255, "0XFF": 255, "18446744073709551615": math.MaxUint64} {
		if h, ok := SeqHash(key); !ok || h != want {
			t.Errorf("SeqHash(%q) = %d %v", key, h, ok)
		}
	}
	for _, key := range []string{"", "0x", "+1", "-1", "1_000", "18446744073709551616", "abc", "0xg", "model@0x1"} {
		if _, ok := SeqHash(key); ok {
			t.Errorf("SeqHash(%q) parsed", key)
		}
	}
}

func TestEncodableSkipsKeysWithoutIdentity(t *testing.T) {
	f := Fields{}
	if f.encodable(Event{Kind: Stored, Key: "name"}) || !f.encodable(Event{Kind: Stored, Key: "7"}) || !f.encodable(Event{Kind: Cleared}) {
		t.Fatal("without object keys only keys with a hash, and cleared, are encodable")
	}
	f.EmitObjectKey = true
	if !f.encodable(Event{Kind: Removed, Key: "name"}) {
		t.Fatal("with object keys every event is encodable")
	}
}

func TestQueueDropsPastCapacityAndMarksTheLossInOrder(t *testing.T) {
	q := newQueue(2)
	for _, k := range []string{"a", "b", "c", "d"} {
		q.push(Event{Kind: Stored, Key: k})
	}
	items := q.take(nil)
	if len(items) != 3 || items[0].ev.Key != "a" || items[1].ev.Key != "b" || items[2].lost != 2 {
		t.Fatalf("items %+v", items)
	}
	if depth, dropped := q.stats(); depth != 0 || dropped != 2 {
		t.Fatalf("depth %d dropped %d", depth, dropped)
	}
	q.push(Event{Key: "e"})
	if items = q.take(items); len(items) != 1 || items[0].ev.Key != "e" {
		t.Fatalf("after take: %+v", items)
	}
	u := newQueue(0)
	for range 1000 {
		u.push(Event{})
	}
	if _, dropped := u.stats(); dropped != 0 {
		t.Fatal("an unbounded queue dropped")
	}
}

func TestRingServesKeptRangesAndRefusesOldOrLostOnes(t *testing.T) {
	r := newRing(3)
	for seq := uint64(10); seq < 15; seq++ {
		var p []byte
		if seq != 13 {
			p = []byte{byte(seq)}
		}
		r.add(seq, p)
	}
	if o, n, _ := r.bounds(); o != 12 || n != 14 {
		t.Fatalf("bounds %d..%d", o, n)
	}
	if _, res := r.collect(11, 20); res != rangeTooOld {
		t.Fatal("11 is gone")
	}
	if _, res := r.collect(12, 14); res != rangeLost {
		t.Fatal("13 was lost")
	}
	if es, res := r.collect(14, 99); res != rangeOK || len(es) != 1 || es[0].seq != 14 {
		t.Fatalf("14: %+v %v", es, res)
	}
	if es, res := r.collect(15, 99); res != rangeOK || len(es) != 0 {
		t.Fatal("past the newest is an empty answer")
	}
	r.add(1000, []byte{1}) // a new epoch
	if o, n, _ := r.bounds(); o != 1000 || n != 1000 {
		t.Fatalf("after a jump: %d..%d", o, n)
	}
}

func TestReplayRepliesFollowTheProtocol(t *testing.T) {
	r := newRing(8)
	for seq := uint64(5); seq < 8; seq++ {
		r.add(seq, []byte{byte(seq)})
	}
	req := binary.BigEndian.AppendUint64(nil, 6)
	msgs, n, refusal := replayReplies([][]byte{{}, req}, r)
	if n != 2 || refusal != "" || len(msgs) != 3 {
		t.Fatalf("%d batches, refusal %q, %d messages", n, refusal, len(msgs))
	}
	if len(msgs[0]) != 4 || len(msgs[0][0]) != 0 || binary.BigEndian.Uint64(msgs[0][2]) != 6 || msgs[0][3][0] != 6 {
		t.Fatalf("first reply %q", msgs[0])
	}
	end := msgs[2]
	if !bytes.Equal(end[2], endSeq) || len(end[3]) != 0 {
		t.Fatalf("end marker %q", end)
	}
	// Without the delimiter, the replies have none; a bounded range.
	msgs, n, _ = replayReplies([][]byte{append(binary.BigEndian.AppendUint64(nil, 5), binary.BigEndian.AppendUint64(nil, 5)...)}, r)
	if n != 1 || len(msgs[0]) != 3 {
		t.Fatalf("undelimited: %d %q", n, msgs)
	}
	for _, bad := range [][][]byte{{}, {{}}, {{1, 2, 3}}, {{}, req, req, req}} {
		msgs, n, refusal = replayReplies(bad, r)
		if n != 0 || refusal != refusedBadRequest || len(msgs) != 1 {
			t.Fatalf("%q: %d %q", bad, n, refusal)
		}
	}
	if _, _, refusal = replayReplies([][]byte{binary.BigEndian.AppendUint64(nil, 1)}, r); refusal != refusedTooOld {
		t.Fatalf("seq 1: %q", refusal)
	}
}

func TestPublisherBatchesInOrderAndCountsLosses(t *testing.T) {
	cfg := Config{Endpoint: "tcp://127.0.0.1:0", ReplayBufferSteps: 100, QueueCapacity: 0,
		Fields: Fields{BackendID: "b", EmitObjectKey: true, EmitLegacyCompat: true}}
	p, err := Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 200 {
		p.Publish(Event{Kind: Stored, Medium: MediumCPU, Tenant: "default", Key: string(rune('a' + i%26))})
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().PublishedEvents < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", p.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := p.Stats()
	if st.PublishedBatches < 4 || st.DroppedEvents != 0 || st.EpochStartSeq == 0 {
		t.Fatalf("stats %+v", st)
	}
	oldest, newest, _ := p.ring.bounds()
	if oldest != st.EpochStartSeq || newest != st.LastSeq || newest-oldest+1 != st.PublishedBatches {
		t.Fatalf("ring %d..%d, stats %+v", oldest, newest, st)
	}
	p.NewEpoch()
	p.Publish(Event{Kind: Cleared, Tenant: "default"})
	for p.Stats().PublishedEvents < 201 {
		time.Sleep(5 * time.Millisecond)
	}
	if st2 := p.Stats(); st2.EpochStartSeq <= st.LastSeq {
		t.Fatalf("the new epoch starts at %d, after %d", st2.EpochStartSeq, st.LastSeq)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Endpoint: "tcp://127.0.0.1:0", ReplayBufferSteps: 1, Fields: Fields{BackendID: "b"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*Config){
		func(c *Config) { c.Endpoint = "" },
		func(c *Config) { c.BackendID = "" },
		func(c *Config) { c.QueueCapacity = -1 },
		func(c *Config) { c.ReplayBufferSteps = 0 },
		func(c *Config) { c.ReplayEndpoint = c.Endpoint },
	} {
		c := good
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

// FuzzParseReplayRequest runs arbitrary request frames (what any peer of
// the replay endpoint may send) through the parser and the reply builder:
// no panic, one end marker, never more batches than the ring holds.
func FuzzParseReplayRequest(f *testing.F) {
	f.Add([]byte{}, binary.BigEndian.AppendUint64(nil, 3), []byte{})
	f.Add(binary.BigEndian.AppendUint64(nil, 0), []byte{}, []byte{})
	f.Add(append(binary.BigEndian.AppendUint64(nil, 9), binary.BigEndian.AppendUint64(nil, 2)...), []byte{}, []byte{})
	f.Add([]byte{}, binary.BigEndian.AppendUint64(nil, 2), binary.BigEndian.AppendUint64(nil, math.MaxUint64))
	r := newRing(4)
	for seq := uint64(2); seq < 7; seq++ {
		r.add(seq, []byte{byte(seq)})
	}
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		for _, frames := range [][][]byte{{a}, {a, b}, {a, b, c}} {
			msgs, n, refusal := replayReplies(frames, r)
			if n > 4 || len(msgs) != n+1 || (refusal != "" && n != 0) {
				t.Fatalf("%q: %d batches, %d messages, refusal %q", frames, n, len(msgs), refusal)
			}
			if end := msgs[len(msgs)-1]; !bytes.Equal(end[len(end)-2], endSeq) {
				t.Fatalf("no end marker: %q", end)
			}
		}
	})
}
