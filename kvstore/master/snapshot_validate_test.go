package master

import (
	"errors"
	"testing"

	"github.com/mooncake-go/mooncake/kvstore"
)

// TestSnapshotInconsistentStateIsRefused: a snapshot whose bytes are
// intact but whose state does not hold together (a replica outside any
// allocation, two objects on the same bytes, an allocator whose extents
// do not add up) is refused, so a restore skips it and a master with no
// other snapshot does not serve (fail closed).
func TestSnapshotInconsistentStateIsRefused(t *testing.T) {
	build := func() *State {
		t.Helper()
		st, err := NewState(DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if code := st.MountSegment("c1", Segment{ID: "s1", Name: "s1", Base: 1 << 20, Size: 1 << 16}, epoch); code != kvstore.OK {
			t.Fatal(code)
		}
		for _, k := range []string{"a", "b"} {
			if _, code := st.PutStart("c1", k, 100, ReplicateConfig{ReplicaNum: 1}, epoch); code != kvstore.OK {
				t.Fatal(code)
			}
			if code := st.PutEnd("c1", k, nil, epoch); code != kvstore.OK {
				t.Fatal(code)
			}
		}
		return st
	}
	if _, _, err := decodeSnapshot(encodeSnapshot(build(), 1, 2), DefaultConfig()); err != nil {
		t.Fatalf("a consistent state: %v", err)
	}
	for name, spoil := range map[string]func(st *State){
		"replica outside any allocation": func(st *State) { st.objects.get("a").replicas[0].off = 1 << 15 },
		"two objects on the same bytes": func(st *State) {
			st.objects.get("b").replicas[0].off = st.objects.get("a").replicas[0].off
		},
		"replica longer than its allocation": func(st *State) { st.objects.get("a").replicas[0].size = 1 << 12 },
		"quarantine holding an object's bytes": func(st *State) {
			r := st.objects.get("a").replicas[0]
			st.discarded = append(st.discarded, discarded{seg: r.seg, off: r.off, len: r.size, releaseAt: epoch})
		},
		"quarantine overlapping an object's end": func(st *State) {
			r := st.objects.get("a").replicas[0]
			st.discarded = append(st.discarded, discarded{seg: r.seg, off: r.off + AlignUp(r.size) - Alignment, len: 2 * Alignment, releaseAt: epoch})
		},
		"an allocation nothing holds":           func(st *State) { st.segments["s1"].alloc.Allocate(64) },
		"a replica shortened, leaking its tail": func(st *State) { st.objects.get("a").replicas[0].size = 8 },
		"free extent over an allocation": func(st *State) {
			a := st.segments["s1"].alloc
			a.free[0].off -= Alignment
			a.free[0].len += Alignment
		},
	} {
		st := build()
		spoil(st)
		if _, _, err := decodeSnapshot(encodeSnapshot(st, 1, 2), DefaultConfig()); !errors.Is(err, errSnapshotInconsistent) {
			t.Errorf("%s: decode = %v, want errSnapshotInconsistent", name, err)
		}
	}
}

// TestSnapshotDoubleHeldBytesAreRefused: with every kind of holder
// present (buildEveryHolder), a range two holders claim, or a holder
// claiming free bytes, makes the file refused.
func TestSnapshotDoubleHeldBytesAreRefused(t *testing.T) {
	if _, _, err := decodeSnapshot(encodeSnapshot(buildEveryHolder(t), 1, 2), DefaultConfig()); err != nil {
		t.Fatalf("a consistent state: %v", err)
	}
	reservation := func(st *State) *reservation {
		for _, r := range st.reservations {
			return r
		}
		return nil
	}
	target := func(st *State) *replica {
		for _, tk := range st.tasks {
			if len(tk.targets) > 0 {
				return tk.targets[0]
			}
		}
		return nil
	}
	for name, spoil := range map[string]func(st *State){
		"reservation piece grown over the committed replica": func(st *State) { reservation(st).pieces[0].len += Alignment },
		"reservation piece moved onto free bytes": func(st *State) {
			r := reservation(st)
			r.pieces[1].off += 1 << 14
		},
		"two reservation pieces sharing bytes": func(st *State) {
			r := reservation(st)
			r.pieces[1] = extent{r.pieces[0].off + Alignment, r.pieces[0].len}
		},
		"task target on the quarantined bytes": func(st *State) {
			tg, q := target(st), st.discarded[0]
			tg.seg, tg.off = q.seg, q.off
		},
		"quarantined twice": func(st *State) { st.discarded = append(st.discarded, st.discarded[0]) },
	} {
		st := buildEveryHolder(t)
		spoil(st)
		if _, _, err := decodeSnapshot(encodeSnapshot(st, 1, 2), DefaultConfig()); !errors.Is(err, errSnapshotInconsistent) {
			t.Errorf("%s: decode = %v, want errSnapshotInconsistent", name, err)
		}
	}
}
