package channel

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer"
)

// Endpoint is a region of a peer's registered memory: the peer's segment
// (as opened by this engine) and the region's address there. Offsets in
// messages are relative to Base.
type Endpoint struct {
	Seg  transfer.SegmentHandle
	Base uint64
}

// Direct reports whether eng reaches the n bytes at Base of ep through a
// direct view (a same-host peer's managed buffer), so that Put writes them
// with a memcpy and its wake-ups reach the receiver.
func (ep Endpoint) Direct(eng *transfer.Engine, n uint64) bool {
	ok, _ := eng.AccessRemote(ep.Seg, ep.Base, n, func([]byte) {})
	return ok
}

// Message is one data-then-flag message to a peer.
type Message struct {
	To Endpoint
	// Data is the payload; a message without Fill has none.
	Data Data
	// Flags are published in order once the payload is in place. The
	// last one is the word the receiver sleeps on: it is woken.
	Flags []Flag
	// Sleepers, when Tracked, locates the receiver's count of waiters
	// blocked on the last flag (Wait.Sleepers): the wake-up, a system
	// call, is made only while that count is not zero. Untracked: always.
	Sleepers SleeperWord
}

// SleeperWord is where a receiver counts its waiters that block on a flag
// word: the 32-bit word at offset Off of its region, when Tracked.
type SleeperWord struct {
	Off     uint64
	Tracked bool
}

// Data is a message's payload, given one of two ways: as bytes (Src, with
// Staging for peers without a direct view), or as callbacks that write it
// (Fill and Stage), for payloads assembled on the way. A message with
// neither Src (empty counts as none) nor Fill has none; Src takes
// precedence over Fill.
type Data struct {
	// Off and Len span the part of the peer's region the payload goes to.
	Off, Len uint64
	// Src is the payload, exactly Len bytes from any memory (empty: none):
	// Put copies it into a direct view of the peer's region, or, when the
	// peer has none, into Staging and writes it from there.
	Src []byte
	// Staging is this side's registered memory (at least Len bytes) that
	// Src is staged in for a peer without a direct view.
	Staging []byte
	// Fill writes the payload into view, a direct view of [Off, Off+Len)
	// of the peer's region, when the peer has one. It must not block.
	Fill func(view []byte)
	// Stage, used when the peer has no direct view, puts the payload into
	// this side's registered memory and returns the writes that carry it.
	Stage func() []Write
}

// fill writes the payload into view, a direct view of the peer's region.
func (d *Data) fill(view []byte) {
	if len(d.Src) > 0 {
		copy(view, d.Src)
		return
	}
	d.Fill(view)
}

// Write is a staged piece of payload: Src (this side's registered memory)
// goes to offset Off of the peer's region.
type Write struct {
	Src []byte
	Off uint64
}

// Flag is one flag word: Val goes to offset Off of the peer's region. Src
// is this side's registered word the value is staged in when it travels by
// transfer; its length (4 or 8) is the flag's width.
type Flag struct {
	Off uint64
	Val uint64
	Src []byte
}

func (f Flag) width() uint64 { return uint64(len(f.Src)) }

// Delivery says which flags Put publishes when some payloads fail.
type Delivery int

const (
	// EachMessage publishes the flags of every message whose payload
	// arrived.
	EachMessage Delivery = iota
	// AllMessages publishes no flag unless every payload arrived: the
	// messages are one step that succeeds or fails as a whole.
	AllMessages
)

// ErrNotDelivered marks the messages of an AllMessages Put whose payload
// arrived but whose flags were withheld because another payload failed.
var ErrNotDelivered = errors.New("channel: withheld, another message of the put failed")

// Put delivers msgs: every payload (direct views first, then the staged
// writes as one batch), then the flags of the messages d allows (directly,
// waking the receiver, or as a second batch). It returns nil when every
// payload and flag arrived, else one error per message (nil: that
// message's payload and flags arrived). Nothing of msgs is kept, and a
// put through direct views allocates nothing.
func Put(eng *transfer.Engine, msgs []Message, d Delivery) []error {
	return PutWithin(eng, msgs, d, Patience{})
}

// PutWithin is Put with its transfers bounded by p (Patience).
//
// A message whose payload is staged bytes (Data.Src) of at most
// transfer.MaxTrailed, and whose flags make one write, sends its flags as
// the payload's trailer (transfer.Request.Trailer): over TCP they travel
// right behind the payload, on its connection, and cost no round trip of
// their own. That is done for every such message of an EachMessage put,
// and for the one message of an AllMessages put of one message; the
// messages of a larger AllMessages put keep the two rounds, since no flag
// of theirs may land before every payload has.
func PutWithin(eng *transfer.Engine, msgs []Message, d Delivery, p Patience) []error {
	errs := failures{n: len(msgs)}
	var staged transferRound
	for i := range msgs {
		m := &msgs[i]
		if len(m.Data.Src) == 0 && m.Data.Fill == nil {
			continue
		}
		if len(m.Data.Src) > 0 && uint64(len(m.Data.Src)) != m.Data.Len {
			errs.set(i, fmt.Errorf("channel: a payload of %d bytes in a message of Len %d", len(m.Data.Src), m.Data.Len))
			continue
		}
		ok, err := eng.AccessRemote(m.To.Seg, m.To.Base+m.Data.Off, m.Data.Len, func(view []byte) { m.Data.fill(view) })
		if err != nil {
			errs.set(i, err)
			continue
		}
		if ok {
			continue
		}
		switch {
		case len(m.Data.Src) > 0 && len(m.Data.Staging) >= len(m.Data.Src):
			st := m.Data.Staging[:len(m.Data.Src)]
			copy(st, m.Data.Src)
			req := m.write(st, m.Data.Off)
			if d == EachMessage || len(msgs) == 1 {
				req.Trailer = m.trailer()
			}
			staged.add(i, req)
		case len(m.Data.Src) > 0:
			errs.set(i, fmt.Errorf("channel: no direct view of the peer, and %d bytes of staging for a payload of %d", len(m.Data.Staging), len(m.Data.Src)))
		case m.Data.Stage != nil:
			for _, w := range m.Data.Stage() {
				staged.add(i, m.write(w.Src, w.Off))
			}
		default:
			errs.set(i, fmt.Errorf("channel: no direct view of the peer and no staging for the payload"))
		}
	}
	staged.run(eng, &errs, p)
	if d == AllMessages && errs.any() {
		for i := range msgs {
			errs.set(i, ErrNotDelivered)
		}
		return errs.errs
	}
	var flags transferRound
	next := 0 // the next staged request, to skip the messages whose flags were trailers
	for i := range msgs {
		trailed := false
		for ; next < len(staged.reqs) && staged.owner[next] <= i; next++ {
			trailed = trailed || staged.owner[next] == i && staged.reqs[next].Trailer.Length > 0
		}
		if errs.get(i) == nil && len(msgs[i].Flags) > 0 && !trailed {
			if err := publish(eng, &msgs[i], i, &flags); err != nil {
				errs.set(i, err)
			}
		}
	}
	flags.run(eng, &errs, p)
	return errs.errs
}

// write is the WRITE of src (this side's registered memory) to offset off
// of m's peer region.
func (m *Message) write(src []byte, off uint64) transfer.Request {
	return transfer.Request{Opcode: transfer.OpWrite, Source: gpu.AddrOf(src), Target: m.To.Seg,
		TargetOffset: m.To.Base + off, Length: uint64(len(src))}
}

// failures collects the errors of a put's n messages, allocating their
// slice only once one fails.
type failures struct {
	n    int
	errs []error
}

// set records err for message i unless it already has one.
func (f *failures) set(i int, err error) {
	if f.errs == nil {
		f.errs = make([]error, f.n)
	}
	if f.errs[i] == nil {
		f.errs[i] = err
	}
}

func (f *failures) get(i int) error {
	if f.errs == nil {
		return nil
	}
	return f.errs[i]
}

func (f *failures) any() bool { return f.errs != nil }

// publish stores m's flags through one direct view spanning them (and the
// receiver's sleeper count) and wakes the receiver unless its count says
// nobody sleeps, or stages them and adds their writes to r (consecutive
// flags that are contiguous on both sides travel as one write).
//
// The flag's store and the count's load, against the waiter's increment of
// the count and load of the flag (Await), are sequentially consistent
// atomics: either this side sees the waiter counted, or the waiter sees the
// flag before it blocks.
func publish(eng *transfer.Engine, m *Message, i int, r *transferRound) error {
	lo, hi := m.Flags[0].Off, uint64(0)
	for _, f := range m.Flags {
		lo, hi = min(lo, f.Off), max(hi, f.Off+f.width())
	}
	last := m.Flags[len(m.Flags)-1]
	hi = max(hi, last.Off+4)
	sl := m.Sleepers
	if sl.Tracked {
		lo, hi = min(lo, sl.Off), max(hi, sl.Off+4)
	}
	ok, err := eng.AccessRemote(m.To.Seg, m.To.Base+lo, hi-lo, func(view []byte) {
		for _, f := range m.Flags {
			store(view[f.Off-lo:], f)
		}
		if !sl.Tracked || atomic.LoadUint32((*uint32)(unsafe.Pointer(&view[sl.Off-lo]))) != 0 {
			transfer.WakeView(view[last.Off-lo:])
		}
	})
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	stageFlags(m, i, r)
	return nil
}

// trailer is m's flags as the trailer of its payload's write, or none
// when they do not make one small write.
func (m *Message) trailer() transfer.Trailer {
	if len(m.Flags) == 0 || m.Data.Len > transfer.MaxTrailed {
		return transfer.Trailer{}
	}
	var r transferRound
	stageFlags(m, 0, &r)
	if len(r.reqs) != 1 || r.reqs[0].Length > transfer.MaxTrailer {
		return transfer.Trailer{}
	}
	return transfer.Trailer{Source: r.reqs[0].Source, TargetOffset: r.reqs[0].TargetOffset, Length: r.reqs[0].Length}
}

// stageFlags stores m's flags in their staging words and adds their
// writes to r as message i's (consecutive flags that are contiguous on
// both sides travel as one write).
func stageFlags(m *Message, i int, r *transferRound) {
	for k, f := range m.Flags {
		store(f.Src, f)
		addr, src, w := m.To.Base+f.Off, gpu.AddrOf(f.Src), f.width()
		if k > 0 {
			prev := &r.reqs[len(r.reqs)-1]
			switch {
			case prev.TargetOffset+prev.Length == addr && prev.Source+uintptr(prev.Length) == src: // right after
				prev.Length += w
				continue
			case addr+w == prev.TargetOffset && src+uintptr(w) == prev.Source: // right before
				prev.TargetOffset, prev.Source = addr, src
				prev.Length += w
				continue
			}
		}
		r.add(i, transfer.Request{Opcode: transfer.OpWrite, Source: src, Target: m.To.Seg, TargetOffset: addr, Length: w})
	}
}

// store writes f's value into mem[0:width] atomically.
func store(mem []byte, f Flag) {
	if f.width() == 8 {
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[0])), f.Val)
		return
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&mem[0])), uint32(f.Val))
}
