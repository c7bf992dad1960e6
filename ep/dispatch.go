package ep

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync/atomic"
	"unsafe"

	"github.com/mooncake-go/mooncake/transfer/channel"
)

// DispatchArgs are one dispatch call's tensors as raw slices. Inputs: X
// (bf16 bits [T,H]), TopkIdx ([T,K], -1 = none). Active ([R], 1 = alive) is
// read and updated in place. Outputs (written by Recv): RecvX ([L,R*N,H]
// bf16, 2 bytes per value, or e4m3, 1 byte), RecvScales (FP8 only, stored
// [L, H/128, R*N]: the column-major layout of upstream's [L, R*N, H/128]
// view), RecvCount [L], SrcInfo [L,R*N] (-1 past the count), LayoutRange
// [L,R] ((begin<<32)|count).
type DispatchArgs struct {
	X         []uint16
	TopkIdx   []int64
	T, K      int
	N, H, E   int
	Active    []int32
	TimeoutUs int64
	FP8       bool

	RecvX       []byte
	RecvScales  []float32
	RecvCount   []int32
	SrcInfo     []int32
	LayoutRange []int64
}

// Op is a call whose send phase has run and whose receive is pending
// (return_recv_hook, async_finish). Recv completes it, once.
type Op struct {
	b      *Buffer
	l      Layout
	half   int
	peers  []*peer
	d      *DispatchArgs
	c      *CombineArgs
	doneCh chan struct{} // closed when the receive (and the send) has finished
	sentCh chan struct{} // closed when the send phase has finished (or was skipped)
	prev   *Op           // the call before, when its receive was pending at send; set once
	err    error         // the receive's outcome, readable once doneCh is closed

	// Guarded by b.mu.
	started  bool   // the receive was started (by a caller, or by Close)
	recvDone bool   // receive finished
	async    bool   // receive runs on its own goroutine
	after    func() // the next call's deferred publication
}

// Half is the buffer half the call uses.
func (o *Op) Half() int { return o.half }

// Recv waits for the call's incoming data and unpacks or reduces it.
// Receives of outstanding calls must be completed in call order. It
// returns ErrClosed when the buffer is closing or Close canceled the wait.
func (o *Op) Recv() error {
	b := o.b
	b.mu.Lock()
	if o.started {
		b.mu.Unlock()
		if b.stop.Load() {
			return ErrClosed
		}
		return fmt.Errorf("ep: receive already completed")
	}
	if p := o.prev; p != nil && !p.recvDone && !p.async {
		b.mu.Unlock()
		return fmt.Errorf("ep: complete the earlier call's receive (its hook) first")
	}
	if !b.life.Enter() {
		b.mu.Unlock()
		return ErrClosed // Close completes the op
	}
	o.started = true
	b.mu.Unlock()
	defer b.life.Exit()
	o.waitPrev()
	o.recv()
	return o.err
}

// RecvAsync runs the receive on its own goroutine; Wait waits for it. On a
// closing buffer the op is completed by Close instead, with ErrClosed.
func (o *Op) RecvAsync() {
	b := o.b
	b.mu.Lock()
	defer b.mu.Unlock()
	o.async = true
	if o.started || !b.life.Enter() {
		return
	}
	o.started = true
	go func() {
		defer b.life.Exit()
		o.waitPrev() // an earlier hook never called still ends nothing: see docs
		o.recv()
	}()
}

// waitPrev waits until the previous call's receive has finished.
func (o *Op) waitPrev() {
	if o.prev != nil {
		<-o.prev.doneCh
	}
}

// Wait blocks until the receive has finished and returns its outcome
// (ErrClosed when Close canceled it).
func (o *Op) Wait() error {
	<-o.doneCh
	return o.err
}

// Done reports whether the receive has finished.
func (o *Op) Done() bool {
	select {
	case <-o.doneCh:
		return true
	default:
		return false
	}
}

// recv runs the receive (or, once Close has begun, only completes the op),
// then starts the next call's deferred send.
func (o *Op) recv() {
	b := o.b
	err := ErrClosed
	if !b.stop.Load() {
		if o.d != nil {
			err = b.dispatchRecv(o)
		} else {
			err = b.combineRecv(o)
		}
	}
	<-o.sentCh // a deferred send may still be finishing its last writes
	b.mu.Lock()
	o.recvDone = true
	o.err = err
	f := o.after
	o.after = nil
	b.mu.Unlock()
	close(o.doneCh)
	if f != nil {
		f()
	}
}

// Dispatch runs a whole dispatch: send, then receive.
func (b *Buffer) Dispatch(a *DispatchArgs) error {
	op, err := b.DispatchSend(a)
	if err != nil {
		return err
	}
	return op.Recv()
}

func (a *DispatchArgs) check(b *Buffer) (Shape, error) {
	s := Shape{T: a.T, K: a.K, N: a.N, H: a.H, E: a.E, R: b.ranks}
	if err := s.check(b.size, a.FP8); err != nil {
		return s, err
	}
	L, RN := s.L(), b.ranks*s.N
	elem := 2
	if a.FP8 {
		elem = 1
	}
	switch {
	case len(a.X) != s.T*s.H:
		return s, fmt.Errorf("ep: x has %d values, want %dx%d", len(a.X), s.T, s.H)
	case len(a.TopkIdx) != s.T*s.K:
		return s, fmt.Errorf("ep: topk_idx has %d values, want %dx%d", len(a.TopkIdx), s.T, s.K)
	case len(a.Active) != b.ranks:
		return s, fmt.Errorf("ep: active_ranks has %d entries, want %d", len(a.Active), b.ranks)
	case len(a.RecvX) != L*RN*s.H*elem:
		return s, fmt.Errorf("ep: recv_x has %d bytes, want %d", len(a.RecvX), L*RN*s.H*elem)
	case a.FP8 && len(a.RecvScales) != L*RN*(s.H/ChannelsPerScale):
		return s, fmt.Errorf("ep: recv scales have %d values, want %d", len(a.RecvScales), L*RN*(s.H/ChannelsPerScale))
	case len(a.RecvCount) != L || len(a.SrcInfo) != L*RN || len(a.LayoutRange) != L*b.ranks:
		return s, fmt.Errorf("ep: recv_count/src_info/layout_range have wrong sizes")
	}
	return s, nil
}

// expertCounts counts the messages per expert and validates the indices.
func expertCounts(idx []int64, e, n int) ([]int32, error) {
	cnt := make([]int32, e)
	for i, v := range idx {
		if v < 0 {
			continue
		}
		if v >= int64(e) {
			return nil, fmt.Errorf("ep: topk_idx entry %d is %d, outside [-1, %d)", i, v, e)
		}
		cnt[v]++
	}
	for ex, c := range cnt {
		if int(c) > n {
			return nil, fmt.Errorf("ep: expert %d is selected %d times by this rank, more than num_max_dispatch_tokens_per_rank=%d (repeated expert in a token's top-k?)", ex, c, n)
		}
	}
	return cnt, nil
}

// DispatchSend checks the call, writes every message and then every count
// into the receivers' buffers, and returns the pending receive.
func (b *Buffer) DispatchSend(a *DispatchArgs) (*Op, error) {
	s, err := a.check(b)
	if err != nil {
		return nil, err
	}
	cnt, err := expertCounts(a.TopkIdx, s.E, s.N)
	if err != nil {
		return nil, err
	}
	l := layoutFor(s.N, s.H, s.E)
	op, err := b.newOp(l, a, nil)
	if err != nil {
		return nil, err
	}
	half, peers := op.half, op.peers
	// The whole send runs now, or, while the previous call's receive is
	// still pending, when that receive ends (see publish).
	b.publish(op, func() {
		R, L, H, N, me := b.ranks, s.L(), s.H, s.N, b.rank
		msg := MsgBytes(H, a.FP8)
		pl := msg - headerBytes

		// Payload of token t: the bf16 row itself, or its FP8 cast (computed
		// once per token, whatever the number of destinations).
		var payload func(t int) []byte
		if a.FP8 {
			need := s.T * int(pl)
			if cap(b.scratch) < need {
				b.scratch = make([]byte, need)
			}
			st := b.scratch[:need]
			G := H / ChannelsPerScale
			for t := 0; t < s.T; t++ {
				p := st[t*int(pl) : (t+1)*int(pl)]
				castFP8Token(a.X[t*H:(t+1)*H], p[:H], unsafe.Slice((*float32)(unsafe.Pointer(&p[H])), G))
			}
			payload = func(t int) []byte { return st[t*int(pl) : (t+1)*int(pl)] }
		} else if s.T > 0 {
			xb := unsafe.Slice((*byte)(unsafe.Pointer(&a.X[0])), 2*len(a.X))
			payload = func(t int) []byte { return xb[t*2*H : (t+1)*2*H] }
		}

		// pack writes the messages for rank d into mem, message (le, slot) at
		// off(le, slot).
		pack := func(d int, mem []byte, off func(le, slot int) int64) {
			cur := make([]int, L)
			for t := 0; t < s.T; t++ {
				for k := 0; k < s.K; k++ {
					e := a.TopkIdx[t*s.K+k]
					if e < 0 || int(e)/L != d {
						continue
					}
					le := int(e) % L
					o := off(le, cur[le])
					cur[le]++
					m := mem[o : o+msg]
					binary.LittleEndian.PutUint64(m, uint64(uint32(t)))
					binary.LittleEndian.PutUint64(m[8:], 0)
					copy(m[headerBytes:], payload(t))
				}
			}
		}
		// Remote placement, relative to the start of the peer's half.
		rd := l.RecvData(half) - l.SendSignal(half)
		recvOff := func(le, slot int) int64 {
			return rd + (int64(le*R+me)*int64(N)+int64(slot))*msg
		}
		// The counts for rank d, -n-1 per local expert, in descending
		// order: le 0 last, the word the receiver sleeps on first. Over
		// TCP each is staged at send_signal[d*L+le].
		counts := func(d int) []channel.Flag {
			fs := make([]channel.Flag, 0, L)
			for le := L - 1; le >= 0; le-- {
				fs = append(fs, b.signal(l.RecvSignal(half)+int64(le*R+me)*4, l.SendSignal(half)+int64(d*L+le)*4, -cnt[d*L+le]-1))
			}
			return fs
		}
		// Over TCP, the messages for rank d are staged in the local
		// send_data ([d][le][slot] x msg), one WRITE per local expert.
		stage := func(d int) []channel.Write {
			pack(d, b.mem, func(le, slot int) int64 {
				return l.SendData(half) + (int64(d*L+le)*int64(N)+int64(slot))*msg
			})
			var ws []channel.Write
			for le := 0; le < L; le++ {
				if n := int64(cnt[d*L+le]); n > 0 {
					src := l.SendData(half) + int64(d*L+le)*int64(N)*msg
					ws = append(ws, channel.Write{Src: b.mem[src : src+n*msg], Off: uint64(l.RecvData(half) + int64(le*R+me)*int64(N)*msg)})
				}
			}
			return ws
		}

		selfHalf := b.mem[l.SendSignal(half) : l.SendSignal(half)+l.HalfBytes()]
		pack(me, selfHalf, recvOff)
		var msgs []channel.Message
		var to []int
		for d := 0; d < R; d++ {
			p := peers[d]
			if d == me || p.seg == 0 || a.Active[d] == 0 {
				// Never connected, or inactive in our view: we neither read
				// nor write it (it times out on us and drops us in turn).
				continue
			}
			msgs = append(msgs, channel.Message{To: p.endpoint(),
				Data: channel.Data{Off: uint64(l.SendSignal(half)), Len: uint64(l.HalfBytes()),
					Fill:  func(hb []byte) { pack(d, hb, recvOff) },
					Stage: func() []channel.Write { return stage(d) }},
				Flags: counts(d)})
			to = append(to, d)
		}
		b.put(msgs, to)
		for _, f := range counts(me) {
			atomic.StoreInt32(b.word(int64(f.Off)), int32(f.Val))
		}
	})
	return op, nil
}

// dispatchRecv waits per (source, local expert) and unpacks in source-rank
// order: rows of source r for local expert le follow those of ranks < r,
// each block in the sender's (token, k) order.
func (b *Buffer) dispatchRecv(o *Op) error {
	a, l, half := o.d, o.l, o.half
	R, L, H, N := b.ranks, l.E/b.ranks, l.H, l.N
	RN := R * N
	G := H / ChannelsPerScale
	msg := MsgBytes(H, a.FP8)
	pl := int(msg - headerBytes)
	run := make([]int, L)
	for i := range a.LayoutRange {
		a.LayoutRange[i] = 0
	}
	for src := 0; src < R; src++ {
		if a.Active[src] == 0 {
			continue // never waited on, never read (no stale data)
		}
		dl := deadlineAfter(a.TimeoutUs)
		shm := o.peers[src].shm
		// le 0 first: senders publish le 0 last and wake on it.
		for le := 0; le < L; le++ {
			w := b.word(l.RecvSignal(half) + int64(le*R+src)*4)
			v := b.waitSignal(w, true, shm, dl)
			if v == 0 && b.stop.Load() {
				return ErrClosed
			}
			if v == 0 {
				a.Active[src] = 0
				slog.Warn("ep: dispatch timed out waiting for rank; marking it inactive", "rank", src, "local_expert", le)
				break
			}
			atomic.StoreInt32(w, 0)
			n := int(-v - 1)
			if n < 0 || n > N {
				slog.Error("ep: corrupt dispatch count", "rank", src, "count", n)
				n = 0
			}
			begin := run[le]
			a.LayoutRange[le*R+src] = int64(begin)<<32 | int64(n)
			base := l.RecvData(half) + int64(le*R+src)*int64(N)*msg
			for m := 0; m < n; m++ {
				mm := b.mem[base+int64(m)*msg : base+int64(m+1)*msg]
				row := le*RN + begin + m
				a.SrcInfo[row] = int32(binary.LittleEndian.Uint32(mm))
				p := mm[headerBytes:]
				if a.FP8 {
					copy(a.RecvX[row*H:(row+1)*H], p[:H])
					sc := unsafe.Slice((*float32)(unsafe.Pointer(&p[H])), G)
					for g, v := range sc {
						a.RecvScales[(le*G+g)*RN+begin+m] = v
					}
				} else {
					copy(a.RecvX[row*2*H:(row+1)*2*H], p[:pl])
				}
			}
			run[le] += n
		}
	}
	for le := 0; le < L; le++ {
		a.RecvCount[le] = int32(run[le])
		si := a.SrcInfo[le*RN : (le+1)*RN]
		for i := run[le]; i < RN; i++ {
			si[i] = -1
		}
	}
	return nil
}
