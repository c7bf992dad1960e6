package backend

import "errors"

// Sentinel errors; ops wrap them with context.
var (
	// ErrInvalid: the request is malformed (sizes, lengths, dtype, op). It is
	// detected before any communication, so the group stays usable.
	ErrInvalid = errors.New("invalid request")
	// ErrClosed: the group was destroyed.
	ErrClosed = errors.New("process group destroyed")
	// ErrPeer: a peer could not be reached (transfer failed, or a wait hit
	// its deadline and the peer no longer answered its liveness probe).
	ErrPeer = errors.New("peer failure")
	// ErrBroken: an earlier op failed during communication; the group's
	// sequence state is no longer consistent across ranks.
	ErrBroken = errors.New("process group broken by an earlier failure")
	// ErrInactive: this rank is not active in the group (it was deactivated
	// after a failure), so it takes part in no collective.
	ErrInactive = errors.New("rank is not active in this group")
)
