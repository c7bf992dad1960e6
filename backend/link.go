package backend

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/transfer"
)

// The push protocol between two ranks on one channel. Message seq (1-based)
// from A to B travels as: A waits until B acknowledged message seq-nSlots
// (its slot is free again), puts the data into B's slot, and only after the
// data is in place writes seq into B's ready word (over TCP, different
// requests may take different connections, so the flag never rides with the
// data) and wakes B. B waits for its ready word to reach seq, uses the slot
// in place, then writes seq into A's ack word and wakes A.
//
// Same-host peers are written directly through the engine
// (transfer.Engine.AccessRemote: one memcpy from the caller's memory into
// the peer's memfd buffer, flags as atomic stores); other peers through the
// engine's WRITE transfers from this rank's staging slots.

// out is one message to send: data (at most one slot), from any memory.
type out struct {
	peer int
	data []byte
}

func (g *Group) word(off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&g.mem[off]))
}

// stage is this rank's staging slot for data going to peer over transfers.
func (g *Group) stage(ch, peer int) ([]byte, uintptr) {
	off := g.lay.stage(ch, peer)
	return g.mem[off : off+g.lay.slot[ch]], g.base + uintptr(off)
}

func (g *Group) timeout(ch int) time.Duration {
	if ch == chP2P {
		return g.p2pTimeout()
	}
	return g.collTimeout()
}

// send delivers msgs (at most one per peer). A same-host peer's slot is
// written directly (Engine.AccessRemote: one copy, from the caller's memory
// into the peer's buffer); otherwise the data is staged in this rank's
// buffer and written with a transfer. Ready words follow once all data is in
// place, then each peer is woken.
func (g *Group) send(ch int, msgs []out) error {
	if len(msgs) == 0 {
		return nil
	}
	var data []transfer.Request
	var dataPeers []int
	for _, m := range msgs {
		seq := g.sent[ch][m.peer] + 1
		if seq-g.seqBase[ch] > nSlots {
			if err := g.waitAtLeast(ch, g.word(g.lay.flag(fAck, ch, m.peer)), seq-nSlots, m.peer, g.timeout(ch)); err != nil {
				return err
			}
		}
		if len(m.data) == 0 {
			continue
		}
		p := g.peer(m.peer)
		dst := p.base + uint64(g.lay.recv(ch, g.rank, seq))
		ok, err := g.engine.AccessRemote(p.seg, dst, uint64(len(m.data)), func(mem []byte) { copy(mem, m.data) })
		if err != nil {
			return peerFailure(m.peer, "write to rank %d (%s): %v", m.peer, p.name, err)
		}
		if !ok {
			st, sa := g.stage(ch, m.peer)
			copy(st, m.data)
			data = append(data, transfer.Request{Opcode: transfer.OpWrite, Source: sa, Target: p.seg,
				TargetOffset: dst, Length: uint64(len(m.data))})
			dataPeers = append(dataPeers, m.peer)
		}
	}
	if err := g.transfer(data, dataPeers); err != nil {
		return err
	}
	var flags []transfer.Request
	var flagPeers []int
	for _, m := range msgs {
		seq := g.sent[ch][m.peer] + 1
		req, err := g.setRemote(ch, fReady, fOutReady, m.peer, seq)
		if err != nil {
			return err
		}
		if req != nil {
			flags = append(flags, *req)
			flagPeers = append(flagPeers, m.peer)
		}
	}
	if err := g.transfer(flags, flagPeers); err != nil {
		return err
	}
	for _, m := range msgs {
		g.sent[ch][m.peer]++
		g.wake(m.peer, g.lay.flag(fReady, ch, g.rank))
	}
	return nil
}

// setRemote sets word `kind` for this rank in peer's buffer to v: directly
// when the peer is on this host, else it returns the transfer that does it
// (from this rank's outgoing word `src`).
func (g *Group) setRemote(ch, kind, src, peer int, v uint64) (*transfer.Request, error) {
	p := g.peer(peer)
	addr := p.base + uint64(g.lay.flag(kind, ch, g.rank))
	ok, err := g.engine.AccessRemote(p.seg, addr, 8, func(mem []byte) {
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[0])), v)
	})
	if err != nil {
		return nil, peerFailure(peer, "write to rank %d (%s): %v", peer, p.name, err)
	}
	if ok {
		return nil, nil
	}
	fo := g.lay.flag(src, ch, peer)
	atomic.StoreUint64(g.word(fo), v)
	return &transfer.Request{Opcode: transfer.OpWrite, Source: g.base + uintptr(fo), Target: p.seg,
		TargetOffset: addr, Length: 8}, nil
}

// wake wakes peer if it blocks on the word at offset off of its buffer.
func (g *Group) wake(peer, off int) {
	p := g.peer(peer)
	_, _ = g.engine.WakeWord(p.seg, p.base+uint64(off))
}

// recv waits for the next message from peer and returns its slot (the
// whole slot; the caller knows the length). The slot stays valid until
// release.
func (g *Group) recv(ch, peer int) ([]byte, error) {
	seq := g.rcvd[ch][peer] + 1
	if err := g.waitAtLeast(ch, g.word(g.lay.flag(fReady, ch, peer)), seq, peer, g.timeout(ch)); err != nil {
		return nil, err
	}
	off := g.lay.recv(ch, peer, seq)
	return g.mem[off : off+g.lay.slot[ch]], nil
}

// release gives the slots of the last message from each of peers back to
// their senders. A failed acknowledgement is not an error of this op: the
// only rank that needs it is the sender, and it notices on its own.
func (g *Group) release(ch int, peers ...int) {
	var reqs []transfer.Request
	var to []int
	for _, pr := range peers {
		g.rcvd[ch][pr]++
		if req, err := g.setRemote(ch, fAck, fOutAck, pr, g.rcvd[ch][pr]); err == nil && req != nil {
			reqs = append(reqs, *req)
			to = append(to, pr)
		}
	}
	if g.transfer(reqs, to) == nil {
		for _, pr := range peers {
			g.wake(pr, g.lay.flag(fAck, ch, g.rank))
		}
	}
}

// transfer runs reqs (reqs[i] goes to peers[i]) as one batch and waits
// for it. When the batch fails, each request is run again on its own (the
// writes and reads are idempotent) to learn which peers failed: the error
// names them; nil when every request succeeded the second time.
func (g *Group) transfer(reqs []transfer.Request, peers []int) error {
	if len(reqs) == 0 {
		return nil
	}
	err := g.runBatch(reqs)
	if err == nil || len(reqs) == 1 {
		if err != nil {
			return &peerError{ranks: peers, msg: fmt.Sprintf("transfer to %s: %v", g.describe(peers), err)}
		}
		return nil
	}
	var failed []int
	for i, r := range reqs {
		if g.runBatch([]transfer.Request{r}) != nil && !slices.Contains(failed, peers[i]) {
			failed = append(failed, peers[i])
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &peerError{ranks: failed, msg: fmt.Sprintf("transfer to %s: %v", g.describe(failed), err)}
}

func (g *Group) runBatch(reqs []transfer.Request) error {
	id, err := g.engine.AllocateBatch(len(reqs))
	if err != nil {
		return err
	}
	defer g.engine.FreeBatch(id)
	if err := g.engine.SubmitTransfer(id, reqs); err != nil {
		return err
	}
	st, err := g.engine.WaitBatch(id)
	if err != nil {
		return err
	}
	if st.Status != transfer.StatusCompleted {
		return fmt.Errorf("%v", st.Status)
	}
	return nil
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
