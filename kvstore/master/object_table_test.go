package master

import (
	"fmt"
	"math/rand"
	"testing"
)

// The object table agrees with a Go map through random inserts, removals
// (of the entry under a key and of a stale object under the same key) and
// lookups, across rehashes in both directions and tombstone reuse; a walk
// yields every entry once.
func TestObjectTableMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var tab objectTable
	ref := map[string]*object{}
	enter := func(o *object) {
		if old := ref[o.key]; old != nil {
			if !tab.remove(old) || old.inTable {
				t.Fatalf("remove of the entry under %q failed or left it inTable", o.key)
			}
		}
		tab.insert(o)
		if !o.inTable {
			t.Fatalf("insert of %q did not mark it inTable", o.key)
		}
		ref[o.key] = o
	}
	check := func(step int) {
		t.Helper()
		if tab.len() != len(ref) {
			t.Fatalf("step %d: %d entries, want %d", step, tab.len(), len(ref))
		}
		seen := map[*object]bool{}
		for o := range tab.all() {
			if seen[o] || ref[o.key] != o {
				t.Fatalf("step %d: walk yielded %q twice or not the entry", step, o.key)
			}
			seen[o] = true
		}
		if len(seen) != len(ref) {
			t.Fatalf("step %d: walk yielded %d of %d", step, len(seen), len(ref))
		}
	}
	for step := range 200_000 {
		// The key space grows then shrinks, so the table grows and
		// shrinks with it.
		space := 1 + step/20
		if step > 100_000 {
			space = 1 + (200_000-step)/20
		}
		key := fmt.Sprintf("k%d", rng.Intn(space))
		switch rng.Intn(4) {
		case 0, 1:
			enter(&object{key: key})
		case 2:
			o := ref[key]
			if o == nil {
				o = &object{key: key}
			}
			if got, want := tab.remove(o), ref[key] != nil; got != want {
				t.Fatalf("step %d: remove(%q) = %v, want %v", step, key, got, want)
			}
			if tab.remove(&object{key: key}) {
				t.Fatalf("step %d: removed an object that is not the entry under %q", step, key)
			}
			delete(ref, key)
		case 3:
			if o, ok := tab.lookup(key); o != ref[key] || ok != (o != nil) {
				t.Fatalf("step %d: lookup(%q) = %p, want %p", step, key, o, ref[key])
			}
		}
		if step%5000 == 0 {
			check(step)
		}
	}
	check(-1)
	for i, sh := range tab.shards {
		if (sh.n+sh.dead)*4 > len(sh.ctrl)*3 {
			t.Fatalf("shard %d: load %d+%d of %d slots", i, sh.n, sh.dead, len(sh.ctrl))
		}
	}
}

// A walk that removes what it visits, or inserts enough to rehash the
// table under it, yields each entry present at its start at most once and
// no entry removed before the walk reached it, as a Go map's.
func TestObjectTableWalkWhileChanging(t *testing.T) {
	var tab objectTable
	add := func(key string) *object {
		o := &object{key: key}
		tab.insert(o)
		return o
	}
	for i := range 1000 {
		add(fmt.Sprint(i))
	}
	// Removing each visited entry and its successor by number, which
	// the walk must then not yield.
	seen := map[string]bool{}
	for o := range tab.all() {
		if seen[o.key] {
			t.Fatalf("%q yielded twice or after its removal", o.key)
		}
		seen[o.key] = true
		tab.remove(o)
		var n int
		fmt.Sscan(o.key, &n)
		if x := tab.get(fmt.Sprint(n + 1)); x != nil && !seen[x.key] {
			tab.remove(x)
			seen[x.key] = true // removed before the walk reached it
		}
	}
	if tab.len() != 0 {
		t.Fatalf("%d entries left", tab.len())
	}
	// Inserting during the walk: the table rehashes under it.
	start := map[*object]bool{}
	for i := range 100 {
		start[add(fmt.Sprint("a", i))] = true
	}
	yielded := map[*object]bool{}
	n := 0
	for o := range tab.all() {
		if yielded[o] {
			t.Fatalf("%q yielded twice", o.key)
		}
		yielded[o] = true
		for ; n < 5000 && n%50 != 49; n++ {
			add(fmt.Sprint("b", n))
		}
		n++
	}
	for o := range start {
		if !yielded[o] {
			t.Fatalf("%q, there when the walk started, was not yielded", o.key)
		}
	}
}
