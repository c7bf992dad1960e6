package ep

import (
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/mooncake-go/mooncake/transfer/channel"
)

// CombineArgs are one combine call's tensors as raw slices. X holds the
// expert outputs in the dispatch layout (bf16 bits [L,R*N,H]); SrcInfo and
// LayoutRange come from the matching dispatch's handle; TopkIdx and Weights
// are this rank's [T,K]. Active ([R]) is read and updated in place. Out
// ([T,H] bf16 bits) receives the weighted sums.
type CombineArgs struct {
	X           []uint16
	TopkIdx     []int64
	Weights     []float32
	T, K        int
	N, H, E     int
	Active      []int32
	TimeoutUs   int64
	SrcInfo     []int32
	LayoutRange []int64
	Out         []uint16
}

// Combine runs a whole combine: send, then receive.
func (b *Buffer) Combine(a *CombineArgs) error {
	op, err := b.CombineSend(a)
	if err != nil {
		return err
	}
	return op.Recv()
}

func (a *CombineArgs) check(b *Buffer) (Shape, error) {
	s := Shape{T: a.T, K: a.K, N: a.N, H: a.H, E: a.E, R: b.ranks}
	if err := s.check(b.size, false); err != nil {
		return s, err
	}
	L, RN := s.L(), b.ranks*s.N
	switch {
	case len(a.X) != L*RN*s.H:
		return s, fmt.Errorf("ep: combine x has %d values, want %dx%dx%d", len(a.X), L, RN, s.H)
	case len(a.TopkIdx) != s.T*s.K || len(a.Weights) != s.T*s.K:
		return s, fmt.Errorf("ep: topk_idx/topk_weights must both be %dx%d", s.T, s.K)
	case len(a.Active) != b.ranks:
		return s, fmt.Errorf("ep: active_ranks has %d entries, want %d", len(a.Active), b.ranks)
	case len(a.SrcInfo) != L*RN || len(a.LayoutRange) != L*b.ranks:
		return s, fmt.Errorf("ep: handle's src_info/layout_range do not match [%d,%d]/[%d,%d]", L, RN, L, b.ranks)
	case len(a.Out) != s.T*s.H:
		return s, fmt.Errorf("ep: out has %d values, want %dx%d", len(a.Out), s.T, s.H)
	}
	for i, v := range a.TopkIdx {
		if v < -1 || v >= int64(s.E) {
			return s, fmt.Errorf("ep: topk_idx entry %d is %d, outside [-1, %d)", i, v, s.E)
		}
	}
	return s, nil
}

// CombineSend sends every expert output row back to the rank that owns its
// token, into slot (my expert, token), then sets one flag per (expert, rank).
func (b *Buffer) CombineSend(a *CombineArgs) (*Op, error) {
	s, err := a.check(b)
	if err != nil {
		return nil, err
	}
	l := layoutFor(s.N, s.H, s.E)
	op, err := b.newOp(l, nil, a)
	if err != nil {
		return nil, err
	}
	half, peers := op.half, op.peers
	// The whole send runs now, or, while the previous call's receive is
	// still pending, when that receive ends (see publish).
	b.publish(op, func() {
		R, L, H, N, me := b.ranks, s.L(), s.H, s.N, b.rank
		RN := R * N
		rowB := int64(2 * H)
		var xb []byte
		if len(a.X) > 0 {
			xb = unsafe.Slice((*byte)(unsafe.Pointer(&a.X[0])), 2*len(a.X))
		}
		rel := func(off int64) int64 { return off - l.SendSignal(half) }

		// rows calls fn(le, row i, token s) for every row this rank sends to d.
		rows := func(d int, fn func(le, i, s int)) {
			for le := 0; le < L; le++ {
				lr := a.LayoutRange[le*R+d]
				begin, n := int(lr>>32), int(lr&0xffffffff)
				if begin < 0 || n < 0 || begin+n > RN {
					slog.Error("ep: combine handle has a bad layout_range", "local_expert", le, "rank", d)
					continue
				}
				for i := begin; i < begin+n; i++ {
					if t := int(a.SrcInfo[le*RN+i]); t >= 0 && t < N {
						fn(le, i, t)
					}
				}
			}
		}
		direct := func(d int, hb []byte) {
			rows(d, func(le, i, t int) {
				o := rel(l.RecvData(half)) + (int64(me*L+le)*int64(N)+int64(t))*rowB
				copy(hb[o:o+rowB], xb[int64(le*RN+i)*rowB:int64(le*RN+i+1)*rowB])
			})
		}
		// Over TCP, rows are staged in send_data ([le][row] x 2H, the row's
		// own place), one WRITE per run of consecutive tokens.
		stage := func(d int) []channel.Write {
			var ws []channel.Write
			lastT, lastI, lastLe := -2, -2, -1
			rows(d, func(le, i, t int) {
				src := l.SendData(half) + int64(le*RN+i)*rowB
				copy(b.mem[src:src+rowB], xb[int64(le*RN+i)*rowB:int64(le*RN+i+1)*rowB])
				if le == lastLe && i == lastI+1 && t == lastT+1 {
					w := &ws[len(ws)-1]
					w.Src = w.Src[:len(w.Src)+int(rowB)]
				} else {
					ws = append(ws, channel.Write{Src: b.mem[src : src+rowB],
						Off: uint64(l.RecvData(half) + (int64(me*L+le)*int64(N)+int64(t))*rowB)})
				}
				lastT, lastI, lastLe = t, i, le
			})
			return ws
		}
		// One flag 1 per local expert, descending (le 0 last: the word the
		// receiver sleeps on), staged at this rank's own send_signal
		// entries, so that over TCP they travel as one WRITE.
		flags := make([]channel.Flag, 0, L)
		for le := L - 1; le >= 0; le-- {
			o := l.RecvSignal(half) + int64(me*L+le)*4
			flags = append(flags, b.signal(o, l.SendSignal(half)+int64(me*L+le)*4, 1))
		}

		direct(me, b.mem[l.SendSignal(half):l.SendSignal(half)+l.HalfBytes()])
		var msgs []channel.Message
		var to []int
		for d := 0; d < R; d++ {
			p := peers[d]
			if d == me || p.seg == 0 || a.Active[d] == 0 {
				continue // see DispatchSend: no writes to inactive ranks
			}
			msgs = append(msgs, channel.Message{To: p.endpoint(),
				Data: channel.Data{Off: uint64(l.SendSignal(half)), Len: uint64(l.HalfBytes()),
					Fill:  func(hb []byte) { direct(d, hb) },
					Stage: func() []channel.Write { return stage(d) }},
				Flags: flags})
			to = append(to, d)
		}
		b.put(msgs, to)
		for _, f := range flags {
			atomic.StoreInt32(b.word(int64(f.Off)), int32(f.Val))
		}
	})
	return op, nil
}

// combineRecv waits for the flags of every alive expert owner, then reduces:
// out[t] = bf16(sum_k w[t,k] * y_{e_k}[t]) in float32, in k order, over
// entries e_k >= 0 whose owner is alive. No renormalisation.
func (b *Buffer) combineRecv(o *Op) error {
	a, l, half := o.c, o.l, o.half
	R, L, H, N := b.ranks, l.E/b.ranks, l.H, l.N
	skip := make([]bool, R) // owners whose terms are dropped
	for r := 0; r < R; r++ {
		if a.Active[r] == 0 {
			skip[r] = true
			continue
		}
		dl := deadlineAfter(a.TimeoutUs)
		for le := 0; le < L; le++ {
			w := b.word(l.RecvSignal(half) + int64(r*L+le)*4)
			if b.waitSignal(w, false, o.peers[r].shm, dl) == 0 {
				if b.stop.Load() {
					return ErrClosed
				}
				a.Active[r] = 0
				skip[r] = true
				slog.Warn("ep: combine timed out waiting for rank; marking it inactive", "rank", r, "local_expert", le)
				break
			}
			atomic.StoreInt32(w, 0)
		}
	}
	base := l.RecvData(half)
	rows := make([][]uint16, 0, a.K)
	acc := make([]float32, H)
	ws := make([]float32, 0, a.K)
	for t := 0; t < a.T; t++ {
		rows, ws = rows[:0], ws[:0]
		for k := 0; k < a.K; k++ {
			e := a.TopkIdx[t*a.K+k]
			if e < 0 || skip[int(e)/L] {
				continue
			}
			off := base + (e*int64(N)+int64(t))*int64(2*H)
			rows = append(rows, unsafe.Slice((*uint16)(unsafe.Pointer(&b.mem[off])), H))
			ws = append(ws, a.Weights[t*a.K+k])
		}
		reduceRows(a.Out[t*H:(t+1)*H], rows, ws, acc)
	}
	return nil
}

// axpyBF16Go does acc += w * float32(row) (len(acc) a multiple of 4); the
// portable version of axpyBF16.
func axpyBF16Go(acc []float32, row []uint16, w float32) {
	row = row[:len(acc)]
	for i := 0; i+4 <= len(acc); i += 4 {
		acc[i] += w * math.Float32frombits(uint32(row[i])<<16)
		acc[i+1] += w * math.Float32frombits(uint32(row[i+1])<<16)
		acc[i+2] += w * math.Float32frombits(uint32(row[i+2])<<16)
		acc[i+3] += w * math.Float32frombits(uint32(row[i+3])<<16)
	}
}

// reduceRows writes out[i] = bf16(sum_j ws[j] * float32(rows[j][i])),
// summing in j order in float32; acc (len(out) floats) is scratch.
func reduceRows(out []uint16, rows [][]uint16, ws []float32, acc []float32) {
	acc = acc[:len(out)]
	clear(acc)
	for j, r := range rows {
		axpyBF16(acc, r, ws[j])
	}
	toBF16(out, acc)
}
