package standalone

import (
	"errors"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// The daemon's side of the rule that no dummy call returns while the
// daemon may still write into its memory (docs/store-deployment.md, "Calls that give
// up").
//
// A call the dummy gives up on (its deadline, or its connection broke) may
// still be running here: the real client's transfers cannot be called
// back, and they write into the daemon's mapping of the dummy's regions.
// When the connection ends, the session therefore revokes its regions at
// once: each mapping is replaced, at the same address, by a private
// copy-on-write mapping of the same file (mmap MAP_FIXED|MAP_PRIVATE).
// Reads still see the dummy's bytes; every write from then on lands in
// pages of the daemon's own, which the dummy never sees, and which go with
// the mapping when the calls have ended and the regions are released. The
// kernel has moved every thread of the daemon to the new pages by the time
// mmap returns, so a copy in the middle of a page continues into the
// private one.
//
// Only then does the session release its hold on the socket: the dummy,
// which half-closes the connection and waits for the daemon's end to close
// (it watches its own held descriptor, see link in dummy.go), learns that
// no call can reach its memory any more. A region that cannot be revoked
// (mmap fails) keeps the socket held until every call of the session has
// ended, and the dummy's wait may then run out (it reports so).

// holdSocket holds the session's socket (ipc.Conn.Hold), so the dummy
// sees the connection end only when unhold runs. A nil conn (a session
// without one, in tests) holds nothing.
func (s *session) holdSocket(conn *ipc.Conn) error {
	if conn == nil {
		return nil
	}
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	if s.unheld || s.revoked {
		return errors.New("the session has ended")
	}
	if s.held {
		return nil
	}
	fd, err := conn.Hold()
	if err != nil {
		return err
	}
	s.hold, s.held = fd, true
	return nil
}

// unhold releases the hold on the socket: once the connection has ended
// too, the dummy sees its end. Safe to call twice.
func (s *session) unhold() {
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	if s.held {
		unix.Close(s.hold)
		s.held = false
	}
	s.unheld = true
}

// revoke makes every region of the session private to the daemon (see
// above) and refuses regions registered from now on. Safe to call twice.
func (s *session) revoke() {
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	if s.revoked {
		return
	}
	s.revoked = true
	for _, r := range s.regions {
		if err := r.revoke(); err != nil {
			s.partial = true
			slog.Error("mooncake_client: cannot revoke a region of a dummy that left; its socket stays open until its calls end",
				"base", r.base, "size", r.size, "err", err)
		}
	}
}

// revokedNow reports whether the session's memory was revoked: a call
// that finds it so after it ran reports failure, since what it wrote went
// to the daemon's private pages.
func (s *session) revokedNow() bool {
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	return s.revoked
}

// revoke replaces the daemon's shared mapping of r by a private
// copy-on-write mapping of the same pages of its file, at the same
// address. On failure it puts a shared mapping back, so the addresses the
// running calls use stay mapped. The caller holds the session's mapMu.
func (r *installed) revoke() error {
	page := uint64(unix.Getpagesize())
	lead := r.offset & (page - 1) // bytes of the first page before base
	start := r.real() - uintptr(lead)
	length := uintptr(r.size + lead)
	mmap := func(flags int) error {
		_, _, errno := unix.Syscall6(unix.SYS_MMAP, start, length, unix.PROT_READ|unix.PROT_WRITE,
			uintptr(flags|unix.MAP_FIXED), uintptr(r.m.FD), uintptr(r.offset-lead))
		if errno != 0 {
			return errno
		}
		return nil
	}
	err := mmap(unix.MAP_PRIVATE | unix.MAP_NORESERVE)
	if err == nil {
		return nil
	}
	if err2 := mmap(unix.MAP_SHARED); err2 != nil {
		slog.Error("mooncake_client: cannot map a dummy region back after a failed revoke", "base", r.base, "err", err2)
	}
	return err
}
