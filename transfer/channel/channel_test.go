package channel

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer"
)

// pair is a sender and a receiver engine, each with one managed buffer,
// and the sender's endpoint of the receiver's buffer.
type pair struct {
	tx, rx       *transfer.Engine
	txMem, rxMem []byte
	to           Endpoint
}

const bufBytes = 1 << 16

func newPair(t testing.TB, forceTCP bool) *pair {
	t.Helper()
	p := &pair{}
	var mems [2][]byte
	for i, e := range []**transfer.Engine{&p.tx, &p.rx} {
		eng, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE", ForceTCP: forceTCP})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		addr, err := eng.AllocateManagedBuffer(bufBytes)
		if err != nil {
			t.Fatal(err)
		}
		*e = eng
		mems[i] = gpu.HostBytes(addr, bufBytes)
	}
	p.txMem, p.rxMem = mems[0], mems[1]
	seg, err := p.tx.OpenSegment(p.rx.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { seg.Close() })
	p.to = Endpoint{Seg: seg.Handle(), Base: uint64(gpu.AddrOf(p.rxMem))}
	return p
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// message puts data at dataOff (staged at the same offset of the sender's
// buffer) and then the flags.
func (p *pair) message(data []byte, dataOff uint64, flags ...Flag) Message {
	return Message{To: p.to, Flags: flags, Data: Data{Off: dataOff, Len: uint64(len(data)),
		Fill: func(view []byte) { copy(view, data) },
		Stage: func() []Write {
			st := p.txMem[dataOff : dataOff+uint64(len(data))]
			copy(st, data)
			return []Write{{Src: st, Off: dataOff}}
		}}}
}

// flag sets the width-byte word at off, staged in the second half of the
// sender's buffer.
func (p *pair) flag(off uint64, width int, v uint64) Flag {
	src := off + bufBytes/2
	return Flag{Off: off, Val: v, Src: p.txMem[src : src+uint64(width)]}
}

func (p *pair) word64(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&p.rxMem[off])) }
func (p *pair) word32(off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&p.rxMem[off])) }

func transports(t *testing.T, f func(t *testing.T, forceTCP bool)) {
	for _, tcp := range []bool{false, true} {
		t.Run(map[bool]string{false: "shm", true: "tcp"}[tcp], func(t *testing.T) { f(t, tcp) })
	}
}

func TestPutDeliversDataBeforeFlags(t *testing.T) {
	transports(t, func(t *testing.T, forceTCP bool) {
		p := newPair(t, forceTCP)
		if got := p.to.Direct(p.tx, 8); got == forceTCP {
			t.Fatalf("Direct = %v with forceTCP %v", got, forceTCP)
		}
		data := pattern(5000, 3)
		done := make(chan error, 1)
		go func() {
			w := p.word64(0)
			done <- DefaultPolicy(2).Await(Wait{Word: WordOf64(w), Ready: func() bool { return atomic.LoadUint64(w) >= 1 },
				Deadline: time.Now().Add(10 * time.Second)})
		}()
		if errs := Put(p.tx, []Message{p.message(data, 4096, p.flag(64, 4, 0xabcd), p.flag(0, 8, 1))}, EachMessage); errs != nil {
			t.Fatal(errs)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p.rxMem[4096:4096+len(data)], data) {
			t.Fatal("payload differs after its flag was seen")
		}
		if v := atomic.LoadUint32(p.word32(64)); v != 0xabcd {
			t.Fatalf("4-byte flag = %#x", v)
		}
	})
}

// Flags that are contiguous on both sides, ascending or descending, all
// arrive with their own values.
func TestPutAdjacentFlags(t *testing.T) {
	transports(t, func(t *testing.T, forceTCP bool) {
		p := newPair(t, forceTCP)
		var up, down []Flag
		for i := range 6 {
			up = append(up, p.flag(uint64(4*i), 4, uint64(10+i)))
			down = append(down, p.flag(uint64(256-4*i), 4, uint64(20+i)))
		}
		for i, err := range Put(p.tx, []Message{{To: p.to, Flags: up}, {To: p.to, Flags: down}}, EachMessage) {
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		for i := range 6 {
			if v := atomic.LoadUint32(p.word32(uint64(4 * i))); v != uint32(10+i) {
				t.Errorf("ascending flag %d = %d", i, v)
			}
			if v := atomic.LoadUint32(p.word32(uint64(256 - 4*i))); v != uint32(20+i) {
				t.Errorf("descending flag %d = %d", i, v)
			}
		}
	})
}

// A payload given as bytes (Data.Src) arrives through a direct view, or,
// over TCP, through its Staging memory; without Staging a peer that has
// no direct view fails the message.
func TestPutSrcPayload(t *testing.T) {
	transports(t, func(t *testing.T, forceTCP bool) {
		p := newPair(t, forceTCP)
		data := pattern(3000, 9)
		m := Message{To: p.to, Flags: []Flag{p.flag(0, 8, 1)},
			Data: Data{Off: 8192, Len: uint64(len(data)), Src: data, Staging: p.txMem[8192:12288]}}
		if errs := Put(p.tx, []Message{m}, EachMessage); errs != nil {
			t.Fatal(errs)
		}
		if !bytes.Equal(p.rxMem[8192:8192+len(data)], data) || atomic.LoadUint64(p.word64(0)) != 1 {
			t.Fatal("Src payload or its flag did not arrive")
		}
		m.Data.Staging, m.Flags = nil, []Flag{p.flag(0, 8, 2)}
		errs := Put(p.tx, []Message{m}, EachMessage)
		switch {
		case forceTCP && (errs == nil || errs[0] == nil):
			t.Fatal("a Src payload without Staging reached a peer with no direct view")
		case !forceTCP && errs != nil:
			t.Fatalf("a direct view needs no Staging: %v", errs)
		}
		if want := map[bool]uint64{false: 2, true: 1}[forceTCP]; atomic.LoadUint64(p.word64(0)) != want {
			t.Fatalf("flag %d, want %d (published only with its payload)", atomic.LoadUint64(p.word64(0)), want)
		}
		// A payload whose length is not the message's Len, or staging
		// too short for it, fails the message, and its flag stays.
		before := atomic.LoadUint64(p.word64(0))
		bad := []Message{
			{To: p.to, Flags: []Flag{p.flag(0, 8, 9)}, Data: Data{Off: 8192, Len: 100, Src: data, Staging: p.txMem[8192:12288]}},
		}
		if forceTCP {
			bad = append(bad, Message{To: p.to, Flags: []Flag{p.flag(0, 8, 9)},
				Data: Data{Off: 8192, Len: uint64(len(data)), Src: data, Staging: p.txMem[8192:9000]}})
		}
		for k, m := range bad {
			if errs := Put(p.tx, []Message{m}, EachMessage); errs == nil || errs[0] == nil {
				t.Fatalf("bad message %d succeeded", k)
			}
		}
		if got := atomic.LoadUint64(p.word64(0)); got != before {
			t.Fatalf("a failed message published its flag: %d, was %d", got, before)
		}
	})
}

// A put of byte payloads and flags through direct views allocates
// nothing: the collectives' small ops make two per op.
func TestPutThroughViewsAllocatesNothing(t *testing.T) {
	p := newPair(t, false)
	data := pattern(64, 4)
	var msgs [2]Message
	var flags [2]Flag
	v := uint64(0)
	allocs := testing.AllocsPerRun(200, func() {
		v++
		for i := range msgs {
			flags[i] = p.flag(uint64(8*i), 8, v)
			msgs[i] = Message{To: p.to, Flags: flags[i : i+1], Sleepers: SleeperWord{Off: 64, Tracked: true},
				Data: Data{Off: uint64(4096 * (i + 1)), Len: uint64(len(data)), Src: data}}
		}
		if errs := Put(p.tx, msgs[:], AllMessages); errs != nil {
			t.Fatal(errs)
		}
	})
	if allocs != 0 {
		t.Fatalf("Put allocated %v times per call", allocs)
	}
	if atomic.LoadUint64(p.word64(8)) != v || !bytes.Equal(p.rxMem[8192:8192+len(data)], data) {
		t.Fatal("the last put did not arrive")
	}
}

// A payload aimed outside the receiver's registered memory fails its
// message; AllMessages then withholds the other messages' flags,
// EachMessage publishes them.
func TestPutDelivery(t *testing.T) {
	transports(t, func(t *testing.T, forceTCP bool) {
		for _, d := range []Delivery{EachMessage, AllMessages} {
			p := newPair(t, forceTCP)
			bad := p.message(pattern(64, 1), 0, p.flag(8, 8, 1))
			bad.To.Base += bufBytes // past the end of the receiver's buffer
			good := p.message(pattern(64, 2), 1024, p.flag(16, 8, 7))
			errs := Put(p.tx, []Message{bad, good}, d)
			if errs[0] == nil {
				t.Fatalf("delivery %d: the message outside registered memory succeeded", d)
			}
			flag := atomic.LoadUint64(p.word64(16))
			switch d {
			case EachMessage:
				if errs[1] != nil || flag != 7 {
					t.Fatalf("EachMessage: good message err %v, flag %d", errs[1], flag)
				}
			case AllMessages:
				if !errors.Is(errs[1], ErrNotDelivered) || flag != 0 {
					t.Fatalf("AllMessages: good message err %v, flag %d", errs[1], flag)
				}
			}
		}
	})
}

func TestGet(t *testing.T) {
	transports(t, func(t *testing.T, forceTCP bool) {
		p := newPair(t, forceTCP)
		want := pattern(3000, 9)
		copy(p.rxMem[8192:], want)
		dst := make([]byte, len(want))
		if err := Get(p.tx, p.to, 8192, dst, p.txMem[:len(want)]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, want) {
			t.Fatal("Get returned other bytes")
		}
	})
}

func TestRunNamesFailedRequests(t *testing.T) {
	p := newPair(t, true)
	src := uint64(gpu.AddrOf(p.txMem))
	reqs := []transfer.Request{
		{Opcode: transfer.OpWrite, Source: uintptr(src), Target: p.to.Seg, TargetOffset: p.to.Base, Length: 128},
		{Opcode: transfer.OpWrite, Source: uintptr(src), Target: p.to.Seg, TargetOffset: p.to.Base + bufBytes, Length: 128},
	}
	errs := Run(p.tx, reqs)
	if errs[0] != nil || errs[1] == nil {
		t.Fatalf("Run errors %v, want only the second to fail", errs)
	}
}

func TestAwaitEndings(t *testing.T) {
	var w uint32
	never := func() bool { return atomic.LoadUint32(&w) == 1 }
	pol := DefaultPolicy(2)
	stop := errors.New("stopped")
	dead := errors.New("peer dead")
	cases := []struct {
		name string
		wait Wait
		want error
	}{
		{"deadline", Wait{Deadline: time.Now().Add(time.Millisecond)}, ErrTimeout},
		{"check", Wait{Check: func() error { return stop }}, stop},
		{"alive", Wait{Alive: func() error { return dead }}, dead},
	}
	extended := 0
	cases = append(cases, struct {
		name string
		wait Wait
		want error
	}{"expired", Wait{Deadline: time.Now(), Expired: func(now time.Time) (time.Time, error) {
		if extended++; extended < 3 {
			return now.Add(time.Millisecond), nil
		}
		return now, dead
	}}, dead})
	for _, c := range cases {
		c.wait.Word, c.wait.Ready = &w, never
		if err := pol.Await(c.wait); !errors.Is(err, c.want) {
			t.Errorf("%s: Await = %v, want %v", c.name, err, c.want)
		}
	}
	if extended != 3 {
		t.Errorf("Expired ran %d times, want 3", extended)
	}
}

// A waiter blocked on a word of its own managed buffer is released by a
// write from another goroutine; the value it sees is the one written.
func TestAwaitSeesWrite(t *testing.T) {
	p := newPair(t, false)
	w := p.word64(128)
	go func() {
		time.Sleep(time.Millisecond)
		if errs := Put(p.tx, []Message{{To: p.to, Flags: []Flag{p.flag(128, 8, 1<<40|5)}}}, EachMessage); errs != nil {
			panic(fmt.Sprint(errs))
		}
	}()
	err := DefaultPolicy(2).Await(Wait{Word: WordOf64(w), Ready: func() bool { return atomic.LoadUint64(w) == 1<<40|5 },
		Deadline: time.Now().Add(10 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
}

// A waiter that only blocks (no spin, no yield, naps of an hour) counts
// itself in its sleeper word while it blocks, and a Put that tracks the
// word wakes it: a skipped wake-up would leave it asleep past the test's
// limit. Many rounds race the waiter's count against the sender's store.
func TestPutWakesCountedSleepersOnly(t *testing.T) {
	p := newPair(t, false)
	block := Policy{FirstNap: time.Hour, MaxNap: time.Hour, LivenessEvery: time.Hour}
	w, sleepers := p.word64(0), p.word32(8)
	msg := func(v uint64) Message {
		return Message{To: p.to, Flags: []Flag{p.flag(0, 8, v)}, Sleepers: SleeperWord{Off: 8, Tracked: true}}
	}
	for round := uint64(1); round <= 300; round++ {
		done := make(chan error, 1)
		go func() {
			done <- block.Await(Wait{Word: WordOf64(w), Sleepers: sleepers,
				Ready: func() bool { return atomic.LoadUint64(w) >= round }})
		}()
		if round%3 == 0 { // let this one be asleep for sure before the put
			for atomic.LoadUint32(sleepers) == 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
		if errs := Put(p.tx, []Message{msg(round)}, EachMessage); errs != nil {
			t.Fatal(errs)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the waiter was not woken", round)
		}
		if n := atomic.LoadUint32(sleepers); n != 0 {
			t.Fatalf("round %d: %d sleepers counted after the wait", round, n)
		}
	}
}

// BenchmarkPutThroughViews is one small collective step's put between two
// same-host engines: a 64-byte payload and its flag, then an
// acknowledgement (a flag alone).
func BenchmarkPutThroughViews(b *testing.B) {
	p := newPair(b, false)
	data := pattern(64, 4)
	var flags [2]Flag
	b.ResetTimer()
	for i := range b.N {
		flags[0] = p.flag(0, 8, uint64(i))
		flags[1] = p.flag(8, 8, uint64(i))
		msgs := [1]Message{{To: p.to, Flags: flags[:1], Sleepers: SleeperWord{Off: 64, Tracked: true},
			Data: Data{Off: 4096, Len: uint64(len(data)), Src: data}}}
		if errs := Put(p.tx, msgs[:], AllMessages); errs != nil {
			b.Fatal(errs)
		}
		msgs = [1]Message{{To: p.to, Flags: flags[1:], Sleepers: SleeperWord{Off: 64, Tracked: true}}}
		if errs := Put(p.tx, msgs[:], EachMessage); errs != nil {
			b.Fatal(errs)
		}
	}
}

// Byte payloads (Data.Src) of messages whose flags make one write carry
// their flags as trailers where they may (EachMessage, or an AllMessages
// put of one message), and keep the AllMessages promise where they may
// not: a large payload lands whole before its flag, a failed message
// never publishes its flag, and no flag of an AllMessages put of several
// lands while one of its payloads failed.
func TestPutSrcPayloadsAndTheirFlags(t *testing.T) {
	transports(t, func(t *testing.T, forceTCP bool) {
		p := newPair(t, forceTCP)
		src := func(data []byte, off, flagOff, v uint64) Message {
			return Message{To: p.to, Flags: []Flag{p.flag(flagOff, 8, v)},
				Data: Data{Off: off, Len: uint64(len(data)), Src: data, Staging: p.txMem[off : off+uint64(len(data))]}}
		}
		for v := uint64(1); v <= 3; v++ {
			data := pattern(bufBytes/2-4096, byte(v))
			done := make(chan bool, 1)
			go func() {
				w := p.word64(0)
				err := DefaultPolicy(2).Await(Wait{Word: WordOf64(w), Ready: func() bool { return atomic.LoadUint64(w) >= v },
					Deadline: time.Now().Add(10 * time.Second)})
				done <- err == nil && bytes.Equal(p.rxMem[4096:4096+len(data)], data)
			}()
			if errs := Put(p.tx, []Message{src(data, 4096, 0, v)}, AllMessages); errs != nil {
				t.Fatal(errs)
			}
			if !<-done {
				t.Fatalf("message %d: its flag was seen before its payload", v)
			}
		}
		for _, d := range []Delivery{EachMessage, AllMessages} {
			bad := src(pattern(64, 1), 1024, 8, 5)
			bad.To.Base += bufBytes // past the end of the receiver's buffer
			good := src(pattern(64, 2), 2048, 16, uint64(10+d))
			errs := Put(p.tx, []Message{bad, good}, d)
			if errs == nil || errs[0] == nil {
				t.Fatalf("delivery %d: the message outside registered memory succeeded", d)
			}
			goodFlag := atomic.LoadUint64(p.word64(16))
			if d == EachMessage && (errs[1] != nil || goodFlag != 10) {
				t.Fatalf("EachMessage: good message err %v, flag %d", errs[1], goodFlag)
			}
			if d == AllMessages && (!errors.Is(errs[1], ErrNotDelivered) || goodFlag != 10) {
				t.Fatalf("AllMessages: good message err %v, flag %d (its earlier value 10)", errs[1], goodFlag)
			}
		}
	})
}

// Post publishes flags without waiting for the ones in flight: through
// direct views they are in place when it returns and nothing is left to
// end; over TCP Wait ends the post with every good flag in place and the
// failed message named, and Drop ends one too.
func TestPostFlags(t *testing.T) {
	transports(t, func(t *testing.T, forceTCP bool) {
		p := newPair(t, forceTCP)
		bad := Message{To: p.to, Flags: []Flag{p.flag(8, 8, 5)}}
		bad.To.Base += bufBytes // past the end of the receiver's buffer
		msgs := []Message{{To: p.to, Flags: []Flag{p.flag(0, 8, 3)}}, bad, {To: p.to, Flags: []Flag{p.flag(16, 4, 4)}}}
		if ps, errs := Post(p.tx, msgs[:1], Patience{}); (ps == nil) == forceTCP || errs != nil {
			t.Fatalf("a post of one good flag left %v in flight over TCP %v: %v", ps, forceTCP, errs)
		} else if ps != nil {
			ps.Wait()
		}
		ps, errs := Post(p.tx, msgs, Patience{})
		if ps == nil { // the bad message has no direct view either way
			t.Fatalf("a post with a transfer left nothing in flight: %v", errs)
		}
		if errs = ps.Wait(); errs == nil || errs[0] != nil || errs[1] == nil || errs[2] != nil {
			t.Fatalf("errors %v, want the second message's only", errs)
		}
		if a, b := atomic.LoadUint64(p.word64(0)), atomic.LoadUint32(p.word32(16)); a != 3 || b != 4 {
			t.Fatalf("flags %d and %d, want 3 and 4", a, b)
		}
		if ps, _ = Post(p.tx, msgs[:1], Patience{}); forceTCP {
			ps.Drop()
			if errs := ps.Wait(); errs != nil {
				t.Fatalf("a dropped post of a good flag: %v", errs)
			}
		}
	})
}
