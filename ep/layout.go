package ep

import "fmt"

// Limits of the API (upstream's kernel limits where they are semantic).
const (
	// MaxTopK is the largest top-k accepted (upstream kNumMaxTopK).
	MaxTopK = 11
	// ChannelsPerScale is the FP8 scaling group width.
	ChannelsPerScale = 128
	// fp8Max is the largest finite e4m3 value.
	fp8Max = 448.0
	// headerBytes precede every dispatch message; the first int32 is the
	// source-local token index.
	headerBytes = 16
)

// SizeHint is upstream's get_ep_buffer_size_hint: the bytes one rank's EP
// buffer needs for calls with at most n tokens per rank, hidden size h and
// e experts (numRanks is accepted, as upstream, and unused).
//
//	16*E + 8*E*N*(16+H)
func SizeHint(n, h, numRanks, e int) int64 {
	_ = numRanks
	return layoutFor(n, h, e).Total()
}

// Layout is the placement of one call's regions in the EP buffer. It depends
// on the call's N, H and E, which every rank passes identically.
//
// Two halves follow each other; half i starts at i*HalfBytes and holds
//
//	send_signal [E]int32 | recv_signal [E]int32 | send_data [S] | recv_data [S]
//
// with S = E*N*(2*16 + 2*H). Dispatch receives message m of source rank r
// for local expert le at recv_data + ((le*R + r)*N + m)*MsgBytes and its count
// (-n-1) at recv_signal[le*R + r]. Combine receives expert e's output for
// local token t at recv_data + (e*N + t)*2H and the flag 1 at
// recv_signal[e].
type Layout struct {
	N, H, E int
	Sig     int64 // bytes of one signal array
	S       int64 // bytes of one data region
}

func layoutFor(n, h, e int) Layout {
	return Layout{N: n, H: h, E: e, Sig: int64(e) * 4, S: int64(e) * int64(n) * (2*16 + 2*int64(h))}
}

// Total is the size of both halves.
func (l Layout) Total() int64 { return 2 * l.HalfBytes() }

// HalfBytes is the size of one half.
func (l Layout) HalfBytes() int64 { return 2*l.Sig + 2*l.S }

// SendSignal is the offset of half's send_signal array.
func (l Layout) SendSignal(half int) int64 { return int64(half) * l.HalfBytes() }

// RecvSignal is the offset of half's recv_signal array.
func (l Layout) RecvSignal(half int) int64 { return l.SendSignal(half) + l.Sig }

// SendData is the offset of half's send_data region.
func (l Layout) SendData(half int) int64 { return l.SendSignal(half) + 2*l.Sig }

// RecvData is the offset of half's recv_data region.
func (l Layout) RecvData(half int) int64 { return l.SendData(half) + l.S }

// MsgBytes is the size of one dispatch message: a 16-byte header, then the
// bf16 payload, or the e4m3 payload followed by H/128 float32 scales.
func MsgBytes(h int, fp8 bool) int64 {
	if fp8 {
		return headerBytes + int64(h) + 4*int64(h/ChannelsPerScale)
	}
	return headerBytes + 2*int64(h)
}

// Shape is what every dispatch and combine call checks.
type Shape struct {
	T, K int // local tokens and top-k
	N    int // max dispatch tokens per rank
	H    int // hidden
	E    int // experts
	R    int // ranks
}

// L is the number of local experts.
func (s Shape) L() int { return s.E / s.R }

// check validates the shape against the API's preconditions and the
// buffer's size.
func (s Shape) check(bufBytes int64, fp8 bool) error {
	switch {
	case s.N <= 0:
		return fmt.Errorf("ep: num_max_dispatch_tokens_per_rank must be positive, got %d", s.N)
	case s.T < 0 || s.T > s.N:
		return fmt.Errorf("ep: %d tokens exceed num_max_dispatch_tokens_per_rank=%d", s.T, s.N)
	case s.H <= 0 || s.H%ChannelsPerScale != 0:
		return fmt.Errorf("ep: hidden=%d is not a positive multiple of %d", s.H, ChannelsPerScale)
	case s.E <= 0 || s.R <= 0 || s.E%s.R != 0:
		return fmt.Errorf("ep: num_experts=%d is not divisible by the %d ranks", s.E, s.R)
	case s.K <= 0 || s.K > MaxTopK:
		return fmt.Errorf("ep: top-k=%d out of range [1, %d]", s.K, MaxTopK)
	case s.K > s.E:
		return fmt.Errorf("ep: top-k=%d exceeds num_experts=%d", s.K, s.E)
	case fp8 && (s.R*s.N)%4 != 0:
		return fmt.Errorf("ep: FP8 dispatch needs num_ranks*num_max_dispatch_tokens_per_rank (%d) to be a multiple of 4", s.R*s.N)
	}
	if need := SizeHint(s.N, s.H, s.R, s.E); need > bufBytes {
		return fmt.Errorf("ep: EP buffer has %d bytes, this call needs %d (get_ep_buffer_size_hint(%d, %d, %d, %d))",
			bufBytes, need, s.N, s.H, s.R, s.E)
	}
	return nil
}
