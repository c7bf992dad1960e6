package master

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
)

// The suspect phase itself is scripted in testdata/client_suspect.txt;
// these tests check how a replica replays it.

func TestClientExpiryEntryRoundTrip(t *testing.T) {
	for _, ex := range []ClientExpiry{
		{},
		{Dead: []string{"a", "b"}},
		{Suspected: []string{"c"}},
		{Dead: []string{"a"}, Suspected: []string{"c", "d"}},
	} {
		got := decodeClientExpiry(encodeClientExpiry(ex))
		if !reflect.DeepEqual(got.Dead, ex.Dead) || !reflect.DeepEqual(got.Suspected, ex.Suspected) {
			t.Errorf("%+v came back as %+v", ex, got)
		}
	}
	// An entry without suspects is the format of a master that knew
	// none: the dead clients' ids, one after another.
	if b := encodeClientExpiry(ClientExpiry{Dead: []string{"a", "b"}}); !bytes.Equal(b, replication.AppendString(replication.AppendString(nil, "a"), "b")) {
		t.Errorf("an entry without suspects is %q", b)
	}
}

// TestReplayedClientPassesJudgeAsTheLeader: a replica applies the logged
// calls and the leader's client passes (expireExactly, then the pass), but
// not the heartbeats the leader saw; it makes the same clients suspect,
// restores and forgets the same ones, and holds the same segments after
// every pass.
func TestReplayedClientPassesJudgeAsTheLeader(t *testing.T) {
	cfg := func(c *Config) { c.ClientTTL, c.ClientDeadTTL = 10*time.Second, 60*time.Second }
	leader, replica := newTestState(t, cfg), newTestState(t, cfg)
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	both := func(f func(st *State)) { f(leader); f(replica) }
	both(func(st *State) {
		for i, c := range []string{"cA", "cB", "cC"} {
			mustMount(t, st, c, Segment{ID: "s" + c, Name: c, Base: 1 << 30, Size: 1 << 20, Incarnation: uint64(i + 1)}, t0)
		}
		mustPut(t, st, "k", 100, ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"cC"}}, t0)
	})
	pass := func(now time.Time) ClientExpiry {
		t.Helper()
		ex := leader.ExpireClients(now)
		replica.expireExactly(decodeClientExpiry(encodeClientExpiry(ex)), now)
		got := replica.ExpireClients(now)
		if !reflect.DeepEqual(got.Suspected, ex.Suspected) || !reflect.DeepEqual(got.Dead, ex.Dead) {
			t.Fatalf("at %v the leader judged %+v, the replica %+v", now.Sub(t0), ex, got)
		}
		if l, r := leader.Segments(), replica.Segments(); !reflect.DeepEqual(l, r) {
			t.Fatalf("at %v segments differ: leader %+v, replica %+v", now.Sub(t0), l, r)
		}
		return ex
	}
	// cB's heartbeats reach the leader only (a known client's pings are
	// not logged); cA stays silent.
	heartbeat := func(s int) {
		if _, code := leader.Ping("cB", 2, at(s)); code != kvstore.OK {
			t.Fatal(code)
		}
	}
	heartbeat(5)
	if ex := pass(at(11)); !reflect.DeepEqual(ex.Suspected, []string{"cA", "cC"}) || len(ex.Dead) != 0 {
		t.Fatalf("at +11s: %+v", ex)
	}
	// cC's ping restores it (a suspect client's ping is logged).
	both(func(st *State) { st.Ping("cC", 3, at(12)) })
	for s := 14; s < 62; s += 8 {
		heartbeat(s)
		both(func(st *State) { st.Ping("cC", 3, at(s)) })
		pass(at(s + 1))
	}
	if ex := pass(at(62)); !reflect.DeepEqual(ex.Dead, []string{"cA"}) {
		t.Fatalf("at +62s: %+v", ex)
	}
	if st := replica.Stats(); st.SuspectClients != 0 || st.Segments != 2 || st.KeyCount != 1 {
		t.Fatalf("replica after the passes: %+v", st)
	}
}
