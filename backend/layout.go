package backend

import (
	"fmt"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// Channels: collectives and point-to-point use separate slots and
// sequence numbers, so a pending recv never blocks a collective and the
// per-peer send and receive queues run independently of the collective FIFO.
const (
	chColl = iota
	chP2P
	numChannels
)

// nSlots is the number of receive slots per (channel, peer): a sender can
// be one message ahead of its receiver.
const nSlots = 2

const (
	cacheLine = 64
	pageSize  = 4096
)

// Default slot sizes. A collective slot is sized from a per-rank budget
// divided by the group size, within [minCollSlot, maxCollSlot];
// MC_PG_SLOT_BYTES and MC_PG_P2P_SLOT_BYTES override.
const (
	collBudget      = 16 << 20
	minCollSlot     = 256 << 10
	maxCollSlot     = 4 << 20
	defaultP2PSlot  = 1 << 20
	slotGranularity = 64
)

// layout places everything one rank's group buffer holds. With n ranks:
//
//	flags:  4 arrays [channel][peer] of one cache line each: ready (written
//	        by the peer: sequence number of its last message to us), ack
//	        (written by the peer: last message of ours it has consumed), each
//	        followed by this rank's count of waiters blocked on it, and the
//	        outgoing words ready/ack are written from (TE sources must be
//	        registered memory)
//	fence:  one cache line: the base of the newest view in which a peer saw
//	        this rank excluded by a failure reconciliation (written by the
//	        peers; fence.go)
//	recv:   [channel][peer][nSlots] slots the peer writes into
//	stage:  [channel][peer] one slot each: data on its way to that peer
//	        over transfers (TCP)
//	pull:   nSlots collective slots peers read from (pull algorithms)
type layout struct {
	n        int
	slot     [numChannels]int
	flagBase [4]int // ready, ack, outReady, outAck
	fenceOff int
	recvBase [numChannels]int
	stgBase  [numChannels]int
	pullBase int
	total    int
}

const (
	fReady = iota
	fAck
	fOutReady
	fOutAck
)

func alignUp(v, a int) int { return (v + a - 1) / a * a }

func newLayout(n, collSlot, p2pSlot int) layout {
	l := layout{n: n, slot: [numChannels]int{collSlot, p2pSlot}}
	off := 0
	for f := range l.flagBase {
		l.flagBase[f] = off
		off += numChannels * n * cacheLine
	}
	l.fenceOff = off
	off += cacheLine
	off = alignUp(off, pageSize)
	for ch := range numChannels {
		l.recvBase[ch] = off
		off += n * nSlots * l.slot[ch]
		off = alignUp(off, pageSize)
	}
	for ch := range numChannels {
		l.stgBase[ch] = off
		off += n * l.slot[ch]
		off = alignUp(off, pageSize)
	}
	l.pullBase = off
	off += nSlots * l.slot[chColl]
	l.total = alignUp(off, pageSize)
	return l
}

func (l layout) flag(kind, ch, peer int) int { return l.flagBase[kind] + (ch*l.n+peer)*cacheLine }

// sleepers is the offset of the count of this rank's waiters blocked on
// flag (kind, ch, peer): the 32-bit word right after the flag, in its cache
// line. The peer reads it after writing the flag, and wakes this rank only
// while it is not zero.
func (l layout) sleepers(kind, ch, peer int) int { return l.flag(kind, ch, peer) + 8 }

// recv is the offset of the slot that message seq (1-based) from peer uses.
func (l layout) recv(ch, peer int, seq uint64) int {
	return l.recvBase[ch] + (peer*nSlots+int((seq-1)%nSlots))*l.slot[ch]
}

func (l layout) stage(ch, peer int) int { return l.stgBase[ch] + peer*l.slot[ch] }

// pull is the offset of pull slot i (mod nSlots).
func (l layout) pull(i int) int { return l.pullBase + i%nSlots*l.slot[chColl] }

// key is what every rank of a group must agree on.
func (l layout) key() string {
	return fmt.Sprintf("v4 slots=%d coll=%d p2p=%d", nSlots, l.slot[chColl], l.slot[chP2P])
}

// slotSizes returns the collective and p2p slot sizes for a group of n.
func slotSizes(n int) (coll, p2p int) {
	coll = min(max(collBudget/max(n, 1), minCollSlot), maxCollSlot)
	coll = envvars.PGSlotBytes.Int(coll)
	p2p = envvars.PGP2PSlotBytes.Int(defaultP2PSlot)
	return alignUp(coll, slotGranularity), alignUp(p2p, slotGranularity)
}
