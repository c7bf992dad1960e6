package master

import (
	"hash/maphash"
	"iter"
	"math/bits"
)

// objectTable is the object table: the objects by key, each object its own
// entry (the key is the record's). It is an open-addressing hash table
// probed linearly, one pointer and one control byte a slot, where a Go
// map[string]*object takes a 16-byte key and a pointer a slot and, as its
// tables grow in step, sits near half full after each doubling: at 10^6
// objects that was 56 bytes an object, this 12 to 24
// (docs/store-master-scale.md). The control byte holds a fingerprint of
// the key's hash, so that a probe reads an object only when its
// fingerprint matches; removal leaves a tombstone, so nothing moves but on
// a rehash, and the load (entries and tombstones) stays at most 3/4.
type objectTable struct {
	seed  maphash.Seed
	ctrl  []uint8   // ctrlEmpty, ctrlDeleted or a fingerprint (≥ ctrlLive)
	slots []*object // len(ctrl), a power of two; nil where ctrl is not a fingerprint
	n     int       // entries
	dead  int       // tombstones
}

// Control bytes.
const (
	ctrlEmpty   = 0
	ctrlDeleted = 1
	ctrlLive    = 2 // fingerprints are ctrlLive..255
)

// minTableSlots is the size of a new table's first array.
const minTableSlots = 64

// hash returns key's hash, whose low bits are where its probe starts, and
// its fingerprint, from the high half.
func (t *objectTable) hash(key string) (uint64, uint8) {
	h := maphash.String(t.seed, key)
	return h, uint8(ctrlLive + (h>>32)%(256-ctrlLive))
}

// len is the number of objects in the table.
func (t *objectTable) len() int { return t.n }

// lookup returns the object under key.
func (t *objectTable) lookup(key string) (*object, bool) {
	o := t.get(key)
	return o, o != nil
}

// get returns the object under key, nil when there is none.
func (t *objectTable) get(key string) *object {
	if t.n == 0 {
		return nil
	}
	h, fp := t.hash(key)
	mask := uint64(len(t.ctrl) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch c := t.ctrl[i]; {
		case c == ctrlEmpty:
			return nil
		case c == fp && t.slots[i].key == key:
			return t.slots[i]
		}
	}
}

// insert enters o under o.key, which must hold no object.
func (t *objectTable) insert(o *object) {
	if (t.n+t.dead+1)*4 > len(t.ctrl)*3 {
		t.rehash()
	}
	h, fp := t.hash(o.key)
	mask := uint64(len(t.ctrl) - 1)
	i := h & mask
	for t.ctrl[i] >= ctrlLive {
		i = (i + 1) & mask
	}
	if t.ctrl[i] == ctrlDeleted {
		t.dead--
	}
	t.ctrl[i], t.slots[i] = fp, o
	t.n++
}

// remove takes o out of the table; false when it is not the object
// under its key.
func (t *objectTable) remove(o *object) bool {
	if t.n == 0 {
		return false
	}
	h, fp := t.hash(o.key)
	mask := uint64(len(t.ctrl) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch c := t.ctrl[i]; {
		case c == ctrlEmpty:
			return false
		case c == fp && t.slots[i] == o:
			t.ctrl[i], t.slots[i] = ctrlDeleted, nil
			t.n--
			t.dead++
			return true
		}
	}
}

// rehash moves the entries into a new array at most half full (twice
// the size when they filled 3/4 of the old one, the same or smaller when
// tombstones did), dropping the tombstones.
func (t *objectTable) rehash() {
	if t.ctrl == nil {
		t.seed = maphash.MakeSeed()
	}
	size := minTableSlots
	if need := 2 * (t.n + 1); need > size {
		size = 1 << bits.Len(uint(need-1))
	}
	oldCtrl, oldSlots := t.ctrl, t.slots
	t.ctrl, t.slots = make([]uint8, size), make([]*object, size)
	mask := uint64(size - 1)
	for j, c := range oldCtrl {
		if c < ctrlLive {
			continue
		}
		i := maphash.String(t.seed, oldSlots[j].key) & mask
		for t.ctrl[i] != ctrlEmpty {
			i = (i + 1) & mask
		}
		t.ctrl[i], t.slots[i] = c, oldSlots[j]
	}
	t.dead = 0
}

// all yields every object in the table, in no particular order. As with a
// Go map, an object removed during the walk before the walk reaches it is
// not yielded, and one inserted during it may or may not be.
func (t *objectTable) all() iter.Seq[*object] {
	return func(yield func(*object) bool) {
		// A rehash during the walk leaves these arrays as they were;
		// what left the table since is no longer inTable.
		ctrl, slots := t.ctrl, t.slots
		for i, c := range ctrl {
			if c >= ctrlLive && slots[i].inTable && !yield(slots[i]) {
				return
			}
		}
	}
}
