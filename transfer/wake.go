package transfer

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// Wake-ups for words in engine-managed (memfd) memory.
//
// A process waiting for a peer to change a word in one of its own managed
// buffers (AllocateManagedBuffer) blocks in WaitWord instead of polling; a
// same-host peer that has written the word (a completed WRITE) calls
// WakeWord. Both sides address the same memfd page, so the kernel's shared
// futex connects them. Over TCP no wake-up travels (WakeWord reports
// false): waiters must bound each wait and re-check, which WaitWord's
// timeout is for.

// WaitWord blocks while the 32-bit word at addr (in this process's memory)
// still holds old, for at most d. It returns true when woken (or when the
// word already differed), false on timeout. Spurious wake-ups are possible:
// callers re-check the word.
func WaitWord(addr uintptr, old uint32, d time.Duration) bool {
	ts := unix.NsecToTimespec(int64(d))
	_, _, errno := unix.Syscall6(unix.SYS_FUTEX, addr, futexWait, uintptr(old),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
	return errno != unix.ETIMEDOUT
}

// PeerExited reports whether the process behind segment h is known to
// have exited: true only for a same-host peer (reached through shared
// memory) whose process is gone or has begun to exit, which the engine
// sees at once, looking now (its pidfd and the kernel's exiting flag of
// the process; not the answer of an earlier look that the access path
// trusts for shm.AliveRecheck); false while it runs, and for peers that
// only a probe can judge (another host). It never blocks.
func (e *Engine) PeerExited(h SegmentHandle) bool {
	s, err := e.segment(h)
	if err != nil || s.name == e.name {
		return false
	}
	return s.peerGone()
}

// WakeWord wakes every WaitWord on the 32-bit word at absolute address addr
// of segment h. It reports whether the wake-up was delivered: true when the
// word lies in a managed buffer of a same-host peer (or of this engine),
// false when the peer is reached over TCP.
func (e *Engine) WakeWord(h SegmentHandle, addr uint64) (bool, error) {
	return e.AccessRemote(h, addr, 4, WakeView)
}

// WakeView wakes every WaitWord on the 32-bit word that view (at least 4
// bytes of a direct view that AccessRemote handed out) starts with: for a
// caller that has just stored the word through that same view, which saves
// WakeWord's second lookup of the peer's mapping.
func WakeView(view []byte) {
	futexWake(uintptr(unsafe.Pointer(&view[:4][0])))
}

// futex operations (linux/futex.h). Not FUTEX_PRIVATE_FLAG: the word is in
// a shared mapping that another process waits or wakes on.
const (
	futexWait   = 0
	futexWakeOp = 1
)

func futexWake(addr uintptr) {
	unix.Syscall6(unix.SYS_FUTEX, addr, futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

// AccessRemote runs fn on a direct view of length bytes at absolute address
// addr of segment h when the target lies in a managed buffer of a
// same-host peer (or of this engine), and reports whether it did. The view
// is valid only during fn (the peer's mapping cannot go away meanwhile); fn
// must not block. false, nil means the target is reachable only through
// transfers (TCP): use SubmitTransfer. This is the engine's zero-copy path
// for callers that produce data straight into a peer's buffer.
func (e *Engine) AccessRemote(h SegmentHandle, addr, length uint64, fn func(mem []byte)) (bool, error) {
	if err := e.enter("access remote memory"); err != nil {
		return false, err
	}
	defer e.life.Exit()
	s, err := e.reachableSegment(h)
	if err != nil {
		return false, err
	}
	if s.name == e.name {
		r := e.reg.acquire(uintptr(addr), length)
		if r == nil {
			return false, errorf(CodeAddressNotRegistered, nil, "[%#x,+%d) is not registered", addr, length)
		}
		defer r.Release()
		if r.placement.Device {
			return false, nil // device memory has no host view
		}
		fn(gpu.HostBytes(uintptr(addr), length))
		return true, nil
	}
	var buf [4]routeConn // one per transport: no allocation per access
	_, conns, err := s.route(buf[:0])
	if err != nil {
		return false, err
	}
	for _, c := range conns {
		if v, ok := c.conn.(transport.DirectView); ok && transport.View(v, addr, length, fn) {
			return true, nil
		}
	}
	return false, nil
}

// AccessMapped is AccessRemote without reaching out to the peer: it runs
// fn on a direct view that the engine already holds of h's memory, also
// while the segment's descriptor is due to be fetched again (a handshake
// with the peer, a probe say, failed), and never waits for the peer. It
// reports false when the engine holds no such view (a TCP peer, a segment
// not fetched yet, a peer whose process is gone). For writing into a peer
// that may be stopped: AccessRemote would first fetch its descriptor, and
// a stopped peer answers no handshake.
func (e *Engine) AccessMapped(h SegmentHandle, addr, length uint64, fn func(mem []byte)) (bool, error) {
	if err := e.enter("access remote memory"); err != nil {
		return false, err
	}
	defer e.life.Exit()
	s, err := e.reachableSegment(h)
	if err != nil {
		return false, err
	}
	if s.name == e.name {
		return false, nil
	}
	var buf [4]routeConn // one per transport: no allocation per access
	for _, c := range s.mapped(buf[:0]) {
		if v, ok := c.conn.(transport.DirectView); ok && transport.View(v, addr, length, fn) {
			return true, nil
		}
	}
	return false, nil
}

// reachableSegment is segment h, or an error when it is unknown or an
// injected link failure cuts this engine off from it.
func (e *Engine) reachableSegment(h SegmentHandle) (*remoteSegment, error) {
	s, err := e.segment(h)
	if err != nil {
		return nil, err
	}
	if err := e.linkBroken(s.name); err != nil {
		return nil, err
	}
	return s, nil
}
