package transport

import (
	"time"
)

// Peer is what a transport learns about a remote segment.
type Peer struct {
	Name string       // the segment's name
	Host string       // the host its handshake address names
	Desc *SegmentDesc // its current descriptor
	// Invalidate asks the engine to fetch the descriptor again before the
	// segment's next use: a conn calls it after a failure that suggests
	// the peer has moved or restarted.
	Invalidate func()
}

// Transport is one way of moving bytes to peer segments.
type Transport interface {
	// Name names the transport ("tcp", "shm") in logs and errors.
	Name() string
	// Reaches reports whether the transport can carry transfers to the
	// peer at all, judged from its descriptor alone, without blocking.
	Reaches(p Peer) bool
	// Connect opens a connection to a peer that Reaches. It may fail
	// (no permission to map the peer's memory, say); the engine then
	// uses the next transport.
	Connect(p Peer) (Conn, error)
}

// Conn is a connection to one peer segment over one transport. All methods
// are safe for concurrent use.
type Conn interface {
	// Carries reports whether the conn can move the peer's
	// [addr, addr+n) (shm: only inside a buffer the peer shares).
	Carries(addr, n uint64) bool
	// Submit starts j and returns without waiting for the bytes to move,
	// for every transport. j.Tracker hears Start once and then one
	// FinishSlice per slice, from any goroutine; a job that cannot run
	// (the conn is closed, its deadline passed) finishes failed.
	Submit(j *Job)
	// Update follows a new descriptor of the same peer. It returns false
	// when the conn cannot follow it (the peer moved to another address
	// or restarted); the engine then closes the conn and connects anew.
	Update(p Peer) bool
	// Check reports, without blocking, whether the conn can be used now:
	// err when the peer is known to be gone (its process exited), stale
	// when the peer's registrations changed since the descriptor of the
	// last Update (the engine fetches the descriptor again, and does not
	// use the conn while it stays stale).
	Check() (stale bool, err error)
	// Close cuts the connection: jobs queued or in flight finish
	// CANCELED or FAILED.
	Close()
}

// ExitWatch is the optional capability of a Conn that can tell, without
// a round trip, whether the peer's process is gone: Exited asks now (no
// answer kept from an earlier look), and reports true from the moment the
// process begins to exit, before the kernel has torn it down (a large
// process takes hundreds of milliseconds to), since a process that has
// begun to exit reads nothing more.
type ExitWatch interface {
	Exited() bool
}

// DirectView is the optional capability of a Conn that can expose the
// peer's memory to this process (a same-host shared mapping).
type DirectView interface {
	// Pin returns the peer's [addr, addr+n) as memory of this process, or
	// false when it cannot (the range is not shared, the mapping is being
	// removed). The mapping cannot go away until the matching Unpin, which
	// the caller makes soon and without blocking in between: removals of
	// the mapping wait for it. View is the usual way to use the pair.
	Pin(addr, n uint64) (mem []byte, ok bool)
	// Unpin ends a Pin that returned true; its memory must not be used
	// after.
	Unpin()
}

// View runs fn on the peer's [addr, addr+n) through v and reports whether
// it could. The memory is valid only during fn, which must not block. fn
// does not escape (View calls it, and nothing keeps it), so a caller's
// closure costs no allocation.
func View(v DirectView, addr, n uint64, fn func(mem []byte)) bool {
	mem, ok := v.Pin(addr, n)
	if !ok {
		return false
	}
	defer v.Unpin()
	fn(mem)
	return true
}

// Placement is where a local memory region lives.
type Placement struct {
	Device  bool // CUDA device memory, not host-accessible
	Ordinal int  // the GPU, when Device
}

// Job is one request as a transport runs it: Length bytes between local
// memory at Local and the peer's absolute address Remote.
type Job struct {
	Op       Opcode
	Local    uintptr
	LocalMem Placement
	Remote   uint64
	Length   uint64
	Deadline time.Time
	Tracker  Tracker
	// Trailer, when its Length is not zero, is written behind the job's
	// bytes (a WRITE of at most one TCP request): only conns that are
	// TrailerCarriers are given such a job.
	Trailer Trailer
}

// Trailer is a few bytes of local host memory at Local that a job writes
// to the peer's absolute address Remote once all of its own bytes are
// there (transfer.Request.Trailer).
type Trailer struct {
	Local  uintptr
	Remote uint64
	Length uint64
}

// TrailerCarrier is the optional capability of a Conn that carries jobs
// with a trailer: it writes the trailer only behind the whole of the
// job's bytes, on a path the peer applies in order (tcp: the same
// connection), and finishes the job's one slice only once both are
// acknowledged.
type TrailerCarrier interface {
	CarriesTrailers()
}

// Tracker hears how a job goes: Start with the number of slices (at least
// one) before any FinishSlice, then each slice's final status and the
// bytes it moved.
type Tracker interface {
	Start(slices int)
	FinishSlice(st Status, moved uint64)
}

// Region is a registered local region, held against unregistration for
// one use.
type Region interface {
	Placement() Placement
	Release()
}

// Exposed is the local memory that peers' requests may touch (what a
// transport's serving side checks every request against).
type Exposed interface {
	// AcquireExposed finds the region peers may reach that holds
	// [addr, addr+n) and holds it until Release; nil when there is none.
	AcquireExposed(addr uintptr, n uint64) Region
}

// SyncRunner is the optional capability of a Conn that can run a job on
// the caller's thread, quicker than Submit and a wait for a caller that
// waits anyway (tcp: a job of one slice over an idle connection, its reply
// awaited in poll(2)).
type SyncRunner interface {
	// RunSync runs j to its end before returning (its Tracker hears
	// everything) and reports true, or reports false at once, having done
	// nothing, for a job it does not run this way.
	RunSync(j *Job) bool
}
