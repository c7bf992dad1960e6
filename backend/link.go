package backend

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/transfer"
	"github.com/mooncake-go/mooncake/transfer/channel"
)

// The push protocol between two ranks on one channel, over the engine's
// data-then-flag messaging (transfer/channel). Message seq (1-based) from A
// to B travels as: A waits until B acknowledged message seq-nSlots (its slot
// is free again), puts the data into B's slot, and only after the data is in
// place writes seq into B's ready word and wakes B (channel.Put). B waits
// for its ready word to reach seq, uses the slot in place, then writes seq
// into A's ack word and wakes A.
//
// Same-host peers are written directly (one memcpy from the caller's memory
// into the peer's memfd buffer, flags as atomic stores); other peers through
// the engine's WRITE transfers from this rank's staging slots and outgoing
// flag words.

// out is one message to send: data (at most one slot), from any memory.
type out struct {
	peer int
	data []byte
}

func (g *Group) word(off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&g.mem[off]))
}

// words returns the 8 bytes of the word at offset off of the group buffer.
func (g *Group) words(off int) []byte { return g.mem[off : off+8 : off+8] }

// stage is this rank's staging slot for data going to peer over transfers.
func (g *Group) stage(ch, peer int) []byte {
	off := g.lay.stage(ch, peer)
	return g.mem[off : off+g.lay.slot[ch]]
}

// endpoint is peer's group buffer.
func (g *Group) endpoint(peer int) channel.Endpoint {
	p := g.peer(peer)
	return channel.Endpoint{Seg: p.seg, Base: p.base}
}

func (g *Group) timeout(ch int) time.Duration {
	if ch == chP2P {
		return g.p2pTimeout()
	}
	return g.collTimeout()
}

// patience bounds the transfers of channel ch as its waits are bounded
// (wait.go): a transfer not done within the channel's timeout goes on
// only while its peer answers the liveness probe. A peer cut off by a
// partition thus fails an op after the timeout plus the probe's deadline,
// whether the op waits for it or writes to it, not after the engine's
// transfer timeout (MC_TRANSFER_TIMEOUT, which still bounds a transfer to
// a live peer in all).
func (g *Group) patience(ch int) channel.Patience {
	return channel.Patience{Timeout: g.timeout(ch), Alive: g.aliveFn}
}

// alive probes the peer whose segment is seg.
func (g *Group) alive(seg transfer.SegmentHandle) error {
	if g.closed.Load() {
		return ErrClosed
	}
	for r := range g.size {
		if p := g.peer(r); p != nil && r != g.rank && p.seg == seg {
			return g.probe(r)
		}
	}
	return nil
}

// flagMessage is the message to peer that sets word kind (fReady or fAck)
// for this rank in peer's buffer to v, staged in this rank's outgoing word
// src; peer is woken only while it blocks on that word.
func (g *Group) flagMessage(ch, kind, src, peer int, v uint64) channel.Message {
	f := &g.flags[kind][ch][peer]
	f[0] = channel.Flag{Off: uint64(g.lay.flag(kind, ch, g.rank)), Val: v, Src: g.words(g.lay.flag(src, ch, peer))}
	return channel.Message{To: g.endpoint(peer), Flags: f[:],
		Sleepers: channel.SleeperWord{Off: uint64(g.lay.sleepers(kind, ch, g.rank)), Tracked: true}}
}

// smallGroup is how many ranks' worth of an op's scratch (messages,
// sources, offsets) lives on the caller's stack: an op among that many
// ranks or fewer allocates none of it.
const smallGroup = 8

// room returns n zeroed elements: buf[:n] (the caller's array) when they
// fit, else a new slice.
func room[T any](buf []T, n int) []T {
	if n <= len(buf) {
		clear(buf[:n])
		return buf[:n]
	}
	return make([]T, n)
}

// send delivers msgs (at most one per peer) as one step: every slot is
// free first, then all data goes, then the ready words (none unless all
// data arrived).
func (g *Group) send(ch int, msgs []out) error {
	if len(msgs) == 0 {
		return nil
	}
	var buf [smallGroup]channel.Message
	put := room(buf[:], len(msgs))[:0]
	for _, m := range msgs {
		seq := g.sent[ch][m.peer] + 1
		if seq-g.seqBase[ch] > nSlots {
			if err := g.waitAtLeast(ch, fAck, m.peer, seq-nSlots, g.timeout(ch)); err != nil {
				return err
			}
		}
		msg := g.flagMessage(ch, fReady, fOutReady, m.peer, seq)
		if len(m.data) > 0 {
			msg.Data = channel.Data{Off: uint64(g.lay.recv(ch, g.rank, seq)), Len: uint64(len(m.data)),
				Src: m.data, Staging: g.stage(ch, m.peer)}
		}
		put = append(put, msg)
	}
	if err := g.putError(msgs, channel.PutWithin(g.engine, put, channel.AllMessages, g.patience(ch))); err != nil {
		return err
	}
	for _, m := range msgs {
		g.sent[ch][m.peer]++
	}
	return nil
}

// awaitRoot, on a non-root rank of a gather or reduce (a no-op on the
// root), waits until the root has taken (acknowledged) every message this
// rank sent it. A non-root's part is done once sent, but the op is not:
// if another non-root dies before sending its part the root fails the op,
// and a non-root that returned at once would report a success the root
// does not share. A failure of this wait finds the op done here (tail):
// the coordinator completes it only if the root did too.
func (g *Group) awaitRoot(root int) error {
	if g.rank == root {
		return nil
	}
	if err := g.waitAtLeast(chColl, fAck, root, g.sent[chColl][root], g.timeout(chColl)); err != nil {
		return tail(err)
	}
	return nil
}

// putError is the peer failure that names the peers whose messages failed
// (nil when none did).
func (g *Group) putError(msgs []out, errs []error) error {
	var failed []int
	var first error
	for i, err := range errs {
		if err == nil || errors.Is(err, channel.ErrNotDelivered) {
			continue
		}
		failed = append(failed, msgs[i].peer)
		if first == nil {
			first = err
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &peerError{ranks: failed, msg: fmt.Sprintf("write to %s: %v", g.describe(failed), first)}
}

// recv waits for the next message from peer and returns its slot (the
// whole slot; the caller knows the length). The slot stays valid until
// release.
func (g *Group) recv(ch, peer int) ([]byte, error) {
	seq := g.rcvd[ch][peer] + 1
	if err := g.waitAtLeast(ch, fReady, peer, seq, g.timeout(ch)); err != nil {
		return nil, err
	}
	off := g.lay.recv(ch, peer, seq)
	return g.mem[off : off+g.lay.slot[ch]], nil
}

// release gives the slots of the last message from each of peers back to
// their senders. A failed acknowledgement is not an error of this op: the
// only rank that needs it is the sender, and it notices on its own.
//
// The collective channel does not wait for its acknowledgements to land
// (over TCP a round trip each): it posts them (channel.Post) and ends the
// post at its next release (settleAcks), so that at most one post is in
// flight and an acknowledgement never overtakes an older one; the post
// itself sends a failed one again, as a waited put would. A new
// membership base and Close drop the post (dropAcks). Point-to-point
// releases, run by per-peer queues, wait as before.
func (g *Group) release(ch int, peers ...int) {
	if ch == chColl {
		g.settleAcks()
	}
	var buf [smallGroup]channel.Message
	acks := room(buf[:], len(peers))[:0]
	for _, pr := range peers {
		g.rcvd[ch][pr]++
		acks = append(acks, g.flagMessage(ch, fAck, fOutAck, pr, g.rcvd[ch][pr]))
	}
	if ch == chColl {
		g.acks, _ = channel.Post(g.engine, acks, g.patience(ch))
		return
	}
	channel.PutWithin(g.engine, acks, channel.EachMessage, g.patience(ch))
}

// settleAcks ends the collective channel's post of acknowledgements, if
// any.
func (g *Group) settleAcks() {
	if ps := g.acks; ps != nil {
		g.acks = nil
		ps.Wait()
	}
}

// dropAcks ends the collective channel's post of acknowledgements, if
// any, without sending failed ones again: they are of an older base.
func (g *Group) dropAcks() {
	if ps := g.acks; ps != nil {
		g.acks = nil
		ps.Drop()
	}
}

func (g *Group) describe(peers []int) string {
	var b strings.Builder
	for i, p := range peers {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "rank %d (%s)", p, g.peer(p).name)
	}
	return b.String()
}
