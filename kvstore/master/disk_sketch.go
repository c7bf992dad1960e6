package master

import "hash/maphash"

// countMinSketch counts events per key in fixed memory (4 rows of 4096
// saturating 8-bit counters, as upstream's promotion admission uses a
// count-min sketch): a key's estimate is never below its true count and
// exceeds it only by collisions.
type countMinSketch struct {
	seeds [4]maphash.Seed
	rows  [4][4096]uint8
}

func newCountMinSketch() *countMinSketch {
	c := &countMinSketch{}
	for i := range c.seeds {
		c.seeds[i] = maphash.MakeSeed()
	}
	return c
}

// add counts one event for key and returns its new estimate.
func (c *countMinSketch) add(key string) int {
	est := 255
	for i := range c.rows {
		cell := &c.rows[i][maphash.String(c.seeds[i], key)%uint64(len(c.rows[i]))]
		if *cell < 255 {
			*cell++
		}
		est = min(est, int(*cell))
	}
	return est
}
