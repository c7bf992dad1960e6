package consistency

import (
	"os"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// history builds records from a compact script: each step is one call or
// return, in the order given (times are the step numbers).
type history struct {
	recs []Record
	t    int64
}

func (h *history) call(w int, op uint64, kind OpKind, keys []string, vals ...ValueID) {
	h.t++
	h.recs = append(h.recs, Record{Type: "call", Worker: w, Op: op, Time: h.t, Kind: kind, Keys: keys, Values: vals})
}

func (h *history) ret(w int, op uint64, res ...Result) {
	h.t++
	h.recs = append(h.recs, Record{Type: "ret", Worker: w, Op: op, Time: h.t, Results: res})
}

// do is a call immediately followed by its return.
func (h *history) do(w int, op uint64, kind OpKind, key string, val ValueID, res Result) {
	var vals []ValueID
	if kind == Put || kind == Upsert {
		vals = []ValueID{val}
	}
	h.call(w, op, kind, []string{key}, vals...)
	h.ret(w, op, res)
}

func v(w, s uint32) ValueID { return ValueID{Writer: w, Seq: s} }

var (
	ok       = Result{}
	notFound = Result{Code: codeObjectNotFound}
	rpcFail  = Result{Code: -900}
)

func read(id ValueID) Result { return Result{Read: id} }

func check(t *testing.T, h *history) Report {
	t.Helper()
	rep, err := Check(h.recs, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range rep.Keys {
		if k.Visualization != "" {
			t.Cleanup(func() { os.Remove(k.Visualization) })
		}
	}
	return rep
}

func TestModelAcceptsLinearizableHistories(t *testing.T) {
	for name, build := range map[string]func(h *history){
		"put get upsert remove": func(h *history) {
			h.do(1, 1, Put, "a", v(1, 1), ok)
			h.do(2, 1, Get, "a", ValueID{}, read(v(1, 1)))
			h.do(1, 2, Put, "a", v(1, 2), ok) // existing key: no effect
			h.do(2, 2, Get, "a", ValueID{}, read(v(1, 1)))
			h.do(1, 3, Upsert, "a", v(1, 3), ok)
			h.do(2, 3, Exist, "a", ValueID{}, Result{Code: 1})
			h.do(2, 4, Get, "a", ValueID{}, read(v(1, 3)))
			h.do(1, 4, Remove, "a", ValueID{}, ok)
			h.do(2, 5, Get, "a", ValueID{}, notFound)
			h.do(2, 6, Exist, "a", ValueID{}, Result{Code: 0})
			h.do(1, 6, Remove, "a", ValueID{}, Result{Code: codeObjectHasLease})
			h.do(1, 5, Remove, "a", ValueID{}, notFound)
		},
		"concurrent upsert: either order": func(h *history) {
			h.do(1, 1, Upsert, "a", v(1, 1), ok)
			h.call(1, 2, Upsert, []string{"a"}, v(1, 2))
			h.do(2, 1, Get, "a", ValueID{}, read(v(1, 1)))
			h.do(2, 2, Get, "a", ValueID{}, read(v(1, 2)))
			h.ret(1, 2, ok)
		},
		"failed write that took effect": func(h *history) {
			h.do(1, 1, Upsert, "a", v(1, 1), rpcFail)
			h.do(2, 1, Get, "a", ValueID{}, notFound)
			h.do(2, 2, Get, "a", ValueID{}, read(v(1, 1))) // landed later
		},
		"failed write that did not": func(h *history) {
			h.do(1, 1, Put, "a", v(1, 1), rpcFail)
			h.do(2, 1, Get, "a", ValueID{}, notFound)
		},
		"write without a return": func(h *history) {
			h.call(1, 1, Remove, []string{"a"})
			h.do(2, 1, Put, "a", v(2, 1), ok)
			h.do(2, 2, Get, "a", ValueID{}, notFound)
		},
		"failed reads say nothing": func(h *history) {
			h.do(1, 1, Put, "a", v(1, 1), ok)
			h.do(2, 1, Get, "a", ValueID{}, Result{Code: -707}) // LEASE_EXPIRED
			h.do(2, 2, Get, "a", ValueID{}, Result{Code: -703}) // REPLICA_IS_NOT_READY
			h.do(2, 3, Exist, "a", ValueID{}, rpcFail)
			h.do(2, 4, Exist, "a", ValueID{}, Result{Code: 0}) // a write may be open
		},
		"batch: one operation per key": func(h *history) {
			h.call(1, 1, BatchPut, []string{"a", "b"}, v(1, 1), v(1, 2))
			h.ret(1, 1, ok, rpcFail)
			h.call(2, 1, BatchGet, []string{"a", "b"})
			h.ret(2, 1, read(v(1, 1)), notFound)
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := &history{}
			build(h)
			if rep := check(t, h); rep.Anomalies() != 0 {
				t.Fatalf("flagged a linearizable history:\n%s", rep)
			}
		})
	}
}

func TestModelFlagsAnomalies(t *testing.T) {
	for name, build := range map[string]func(h *history){
		"lost write": func(h *history) {
			h.do(1, 1, Put, "a", v(1, 1), ok)
			h.do(2, 1, Get, "a", ValueID{}, notFound)
		},
		"stale read": func(h *history) {
			h.do(1, 1, Upsert, "a", v(1, 1), ok)
			h.do(1, 2, Upsert, "a", v(1, 2), ok)
			h.do(2, 1, Get, "a", ValueID{}, read(v(1, 1)))
		},
		"resurrected after remove": func(h *history) {
			h.do(1, 1, Put, "a", v(1, 1), ok)
			h.do(1, 2, Remove, "a", ValueID{}, ok)
			h.do(2, 1, Exist, "a", ValueID{}, Result{Code: 1})
		},
		"put overwrote": func(h *history) {
			h.do(1, 1, Put, "a", v(1, 1), ok)
			h.do(1, 2, Put, "a", v(1, 2), ok)
			h.do(2, 1, Get, "a", ValueID{}, read(v(1, 2)))
		},
		"read of a value before its write": func(h *history) {
			h.do(2, 1, Get, "a", ValueID{}, read(v(1, 1)))
			h.do(1, 1, Upsert, "a", v(1, 1), ok)
		},
		"torn read": func(h *history) {
			h.do(1, 1, Upsert, "a", v(1, 1), ok)
			h.do(2, 1, Get, "a", ValueID{}, Result{Torn: "checksum mismatch"})
		},
		"torn read and a lost write": func(h *history) {
			h.do(1, 1, Upsert, "a", v(1, 1), ok)
			h.do(2, 1, Get, "a", ValueID{}, Result{Torn: "checksum mismatch"})
			h.do(2, 2, Get, "a", ValueID{}, notFound)
		},
		"batch key lost": func(h *history) {
			h.call(1, 1, BatchPut, []string{"a", "b"}, v(1, 1), v(1, 2))
			h.ret(1, 1, ok, ok)
			h.call(2, 1, BatchGet, []string{"a", "b"})
			h.ret(2, 1, read(v(1, 1)), notFound)
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := &history{}
			build(h)
			rep := check(t, h)
			if rep.Anomalies() == 0 {
				t.Fatalf("passed a history that is not linearizable:\n%s", rep)
			}
			s := rep.String()
			if !strings.Contains(s, "none of these can come next") && !strings.Contains(s, "torn read: ") {
				t.Fatalf("report lacks the failing point:\n%s", s)
			}
			for _, k := range rep.Keys {
				if name == "torn read" && (k.Result != porcupine.Ok || len(k.Torn) != 1 || rep.Anomalies() != 1) {
					t.Fatalf("torn read alone: %d torn, the rest %s, %d anomalies", len(k.Torn), k.Result, rep.Anomalies())
				}
				if name == "torn read and a lost write" && (k.Result != porcupine.Illegal || rep.Anomalies() != 2) {
					t.Fatalf("torn read and a lost write: the rest %s, %d anomalies", k.Result, rep.Anomalies())
				}
				if k.Visualization == "" && (k.Result == porcupine.Illegal || len(k.Torn) > 0) {
					t.Fatalf("key %q: no visualization", k.Key)
				}
				if k.Visualization != "" {
					if st, err := os.Stat(k.Visualization); err != nil || st.Size() == 0 {
						t.Fatalf("visualization %q: %v", k.Visualization, err)
					}
				}
			}
		})
	}
}

// TestFailedWritesNobodyReadStillCount: the checker first leaves out the
// failed writes whose value nobody read; where that rest has no
// linearization, the whole history is searched, and a failed write that
// explains what readers saw makes it linearizable.
func TestFailedWritesNobodyReadStillCount(t *testing.T) {
	h := &history{}
	h.do(1, 1, Upsert, "a", v(1, 1), rpcFail) // landed: the key exists
	h.do(2, 1, Exist, "a", ValueID{}, Result{Code: 1})
	h.do(2, 2, Remove, "a", ValueID{}, ok)
	if rep := check(t, h); rep.Anomalies() != 0 || rep.Keys[0].Result != porcupine.Ok {
		t.Fatalf("flagged a linearizable history:\n%s", rep)
	}
	if n := len(withoutUnreadFailedWrites(mustOps(t, h))); n != 2 {
		t.Fatalf("%d operations left, want the exist and the remove", n)
	}
}

func mustOps(t *testing.T, h *history) []porcupine.Operation {
	t.Helper()
	ops, err := Operations(h.recs)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}
