package transfer

import (
	"github.com/mooncake-go/mooncake/transfer/tcp"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// Trailers. A WRITE may carry a trailer: a few bytes (a flag word, say)
// that must reach the target only after the WRITE's own bytes, so that a
// peer that sees the trailer finds the bytes in place. Written as a second
// request after the first completed, that ordering costs a round trip;
// carried as a trailer it costs none over TCP, where the trailer travels
// right behind the bytes on the same connection and the target applies a
// connection's requests in order. Through a direct view (a same-host
// peer, or this engine's own segment) the trailer is copied right after
// the bytes.
//
// The request completes only when both did. A connection that fails
// before the trailer arrived leaves it unwritten; the trailer lies in the
// same registered buffer of the target as the bytes (checked at
// submission), so a target that rejects the bytes rejects it too.

// MaxTrailed is the largest request that may carry a trailer: one TCP
// request (tcp.SliceSize), which the target applies whole before the next
// request of the same connection.
const MaxTrailed = tcp.SliceSize

// MaxTrailer is the largest trailer.
const MaxTrailer = 4096

// Trailer is the second WRITE of a request (Request.Trailer): Length bytes
// from this side's registered host memory at Source to the absolute address
// TargetOffset of the request's target. The zero Trailer is none.
type Trailer struct {
	Source       uintptr
	TargetOffset uint64
	Length       uint64
}

// checkTrailer refuses a trailer that cannot ride on r.
func (e *Engine) checkTrailer(r Request) error {
	tr := r.Trailer
	if tr.Length == 0 {
		return nil
	}
	switch {
	case r.Opcode != OpWrite:
		return errorf(CodeInvalidArgument, nil, "a trailer on a READ")
	case r.Length == 0 || r.Length > MaxTrailed:
		return errorf(CodeInvalidArgument, nil, "a trailer on a request of %d bytes (1 to %d)", r.Length, MaxTrailed)
	case tr.Length > MaxTrailer:
		return errorf(CodeInvalidArgument, nil, "a trailer of %d bytes (at most %d)", tr.Length, MaxTrailer)
	case tr.TargetOffset+tr.Length < tr.TargetOffset:
		return errorf(CodeInvalidArgument, nil, "trailer's remote range wraps")
	}
	switch reg := e.reg.find(tr.Source, tr.Length); {
	case reg == nil:
		return errorf(CodeAddressNotRegistered, nil, "trailer's local [%#x,+%d) is not registered", tr.Source, tr.Length)
	case reg.placement.Device:
		return errorf(CodeInvalidArgument, nil, "a trailer in device memory")
	}
	return nil
}

// trailerBuffer reports whether t's trailer (if any) lies in buffer i of
// the target's descriptor d.
func trailerBuffer(d *SegmentDesc, t *task, i int) bool {
	tr := t.req.Trailer
	return tr.Length == 0 || d.FindBuffer(tr.TargetOffset, tr.Length) == i
}

// job's trailer, as the transports see it.
func (t *task) jobTrailer() transport.Trailer {
	tr := t.req.Trailer
	return transport.Trailer{Local: tr.Source, Remote: tr.TargetOffset, Length: tr.Length}
}
