package client

import "context"

// Arena allocates aligned ranges of a buffer the caller owns, the way the
// client's local buffer is shared between staging and leases. The
// standalone dummy client stages through its shared local buffer with it.
type Arena struct{ a *arena }

// NewArena manages buf (which must stay mapped while the Arena is used).
func NewArena(buf []byte) *Arena { return &Arena{newArena(buf)} }

// Alloc waits for n bytes aligned to align (a power of two) until ctx ends.
func (a *Arena) Alloc(ctx context.Context, n, align uint64) (uintptr, error) {
	return a.a.alloc(ctx, n, align)
}

// Free returns the range that starts at p; false if none does.
func (a *Arena) Free(p uintptr) bool { return a.a.release(p) }

// Size is the buffer's size.
func (a *Arena) Size() uint64 { return a.a.size }
