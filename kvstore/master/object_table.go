package master

import (
	"hash/maphash"
	"iter"
	"math/bits"
)

// objectTable is the object table: the objects by key, each object its own
// entry (the key is the record's). It is tableShards open-addressing hash
// tables probed linearly, one pointer and one control byte a slot, where a
// Go map[string]*object takes a 16-byte key and a pointer a slot and, as
// its tables grow in step, sat near half full at 10^6 objects: 56 bytes an
// object there, 12 to 24 here (docs/store-master-scale.md). The control
// byte holds a fingerprint of the key's hash, so that a probe reads an
// object only when its fingerprint matches; removal leaves a tombstone, so
// nothing moves but on a rehash, and a shard's load (entries and
// tombstones) stays at most 3/4. The top bits of the hash pick the shard,
// so that a rehash, which reads every key of its shard under the master
// lock, takes 1/tableShards of the table: one table of 10^6 objects took
// 100 ms to double on the development host.
type objectTable struct {
	seed   maphash.Seed
	shards []tableShard // tableShards, made with the first insert
	n      int          // entries
}

// tableShard is one of the table's open-addressing tables.
type tableShard struct {
	ctrl  []uint8   // ctrlEmpty, ctrlDeleted or a fingerprint (≥ ctrlLive)
	slots []*object // len(ctrl), a power of two; nil where ctrl is not a fingerprint
	n     int       // entries
	dead  int       // tombstones
}

// tableShards is the number of shards, a power of two; shardBits its log.
const (
	shardBits   = 10
	tableShards = 1 << shardBits
)

// Control bytes.
const (
	ctrlEmpty   = 0
	ctrlDeleted = 1
	ctrlLive    = 2 // fingerprints are ctrlLive..255
)

// minShardSlots is the size of a shard's first array.
const minShardSlots = 8

// locate returns key's shard, its hash, whose low bits are where its
// probe starts, and its fingerprint, from the high half.
func (t *objectTable) locate(key string) (*tableShard, uint64, uint8) {
	h := maphash.String(t.seed, key)
	return &t.shards[h>>(64-shardBits)], h, uint8(ctrlLive + (h>>32)%(256-ctrlLive))
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
	sh, h, fp := t.locate(key)
	if sh.n == 0 {
		return nil
	}
	mask := uint64(len(sh.ctrl) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch c := sh.ctrl[i]; {
		case c == ctrlEmpty:
			return nil
		case c == fp && sh.slots[i].key == key:
			return sh.slots[i]
		}
	}
}

// insert enters o under o.key, which must hold no object, and marks it
// inTable.
func (t *objectTable) insert(o *object) {
	if t.shards == nil {
		t.seed = maphash.MakeSeed()
		t.shards = make([]tableShard, tableShards)
	}
	sh, h, fp := t.locate(o.key)
	if (sh.n+sh.dead+1)*4 > len(sh.ctrl)*3 {
		sh.rehash(t.seed)
	}
	mask := uint64(len(sh.ctrl) - 1)
	i := h & mask
	for sh.ctrl[i] >= ctrlLive {
		i = (i + 1) & mask
	}
	if sh.ctrl[i] == ctrlDeleted {
		sh.dead--
	}
	sh.ctrl[i], sh.slots[i] = fp, o
	sh.n++
	t.n++
	o.inTable = true
}

// remove takes o out of the table and clears its inTable; false when it
// is not the object under its key.
func (t *objectTable) remove(o *object) bool {
	if t.n == 0 {
		return false
	}
	sh, h, fp := t.locate(o.key)
	if sh.n == 0 {
		return false
	}
	mask := uint64(len(sh.ctrl) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch c := sh.ctrl[i]; {
		case c == ctrlEmpty:
			return false
		case c == fp && sh.slots[i] == o:
			sh.ctrl[i], sh.slots[i] = ctrlDeleted, nil
			sh.n--
			sh.dead++
			t.n--
			o.inTable = false
			return true
		}
	}
}

// rehash moves the shard's entries into a new array at most half full
// (twice the size when they filled 3/4 of the old one, the same or
// smaller when tombstones did), dropping the tombstones.
func (sh *tableShard) rehash(seed maphash.Seed) {
	size := minShardSlots
	if need := 2 * (sh.n + 1); need > size {
		size = 1 << bits.Len(uint(need-1))
	}
	oldCtrl, oldSlots := sh.ctrl, sh.slots
	sh.ctrl, sh.slots = make([]uint8, size), make([]*object, size)
	mask := uint64(size - 1)
	for j, c := range oldCtrl {
		if c < ctrlLive {
			continue
		}
		i := maphash.String(seed, oldSlots[j].key) & mask
		for sh.ctrl[i] != ctrlEmpty {
			i = (i + 1) & mask
		}
		sh.ctrl[i], sh.slots[i] = c, oldSlots[j]
	}
	sh.dead = 0
}

// all yields every object in the table, in no particular order. As with a
// Go map, an object removed during the walk before the walk reaches it is
// not yielded, and one inserted during it may or may not be.
func (t *objectTable) all() iter.Seq[*object] {
	return func(yield func(*object) bool) {
		for k := range t.shards {
			// A rehash during the walk leaves these arrays as they
			// were; what left the table since is no longer inTable
			// (remove clears it).
			ctrl, slots := t.shards[k].ctrl, t.shards[k].slots
			for i, c := range ctrl {
				if c >= ctrlLive && slots[i].inTable && !yield(slots[i]) {
					return
				}
			}
		}
	}
}
