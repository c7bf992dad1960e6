// Package hotcache is the local hot cache of a store client: a bounded set
// of fixed-size blocks holding copies of objects recently read from the
// pool, so that later reads of the same key are served from local memory.
//
// One process writes a cache (the real client: fills after reads, and
// invalidations for its own writes and removes). Its memory can be a
// memfd, which other processes on the host (dummy clients) map read-only
// and read through a View without asking the writer: every block carries a
// sequence number that is odd while the writer changes the block (a
// seqlock), so a reader that raced a change sees the number move and
// treats the read as a miss.
//
// Only the writer can write the region: the memfd is sealed
// (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_FUTURE_WRITE, F_SEAL_SEAL) after the
// writer maps it, so a reader's descriptor maps read-only and cannot be
// written, resized or resealed. The writer keeps its own index in private
// memory and never reads the records it publishes; readers bound every
// length they decode (parseHeader, readRecord).
//
// Layout of the region (all integers little-endian, native alignment):
// a 4 KiB header page (magic, block size, sets, ways, maximum age), then
// one 256-byte slot record per block (sequence, object size, fill time,
// key), then the blocks. Blocks are grouped in sets of `ways`; a key lives
// in the set its hash names, so a lookup reads at most `ways` records.
package hotcache
