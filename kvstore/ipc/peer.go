package ipc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peer is the process at the other end of a Unix connection, as the
// kernel recorded it when that process connected (SO_PEERCRED): its pid,
// effective uid and gid, and its supplementary groups (SO_PEERGROUPS).
// Ids are as seen from this process's user namespace.
type Peer struct {
	PID    int32
	UID    uint32
	GID    uint32
	Groups []uint32
}

// maxPeerGroups bounds the supplementary groups read of a peer: the
// kernel's NGROUPS_MAX.
const maxPeerGroups = 65536

// PeerOf returns who is at the other end of uc.
func PeerOf(uc *net.UnixConn) (Peer, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var p Peer
	var perr error
	err = rc.Control(func(fd uintptr) {
		var cred *unix.Ucred
		if cred, perr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); perr != nil {
			return
		}
		p = Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}
		p.Groups, perr = peerGroups(int(fd))
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return Peer{}, fmt.Errorf("ipc: credentials of the peer: %w", err)
	}
	return p, nil
}

// peerGroups reads SO_PEERGROUPS; a kernel without it (before 4.13)
// yields none.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case errno == 0:
			return buf[:n/4], nil
		case errno == unix.ERANGE && len(buf) < maxPeerGroups && n/4 > uint32(len(buf)):
			buf = make([]uint32, min(int(n/4), maxPeerGroups))
		case errno == unix.ERANGE:
			return nil, errno // more than NGROUPS_MAX: not a kernel's answer
		case errors.Is(errno, unix.ENOPROTOOPT):
			return nil, nil
		default:
			return nil, errno
		}
	}
}

// Admission says which peers may use a socket: processes of the listening
// process's own effective uid always, and those whose uid is in UIDs or
// whose primary or a supplementary gid is in GIDs. Root is no exception:
// a root peer is admitted only when the listener runs as root or 0 is in
// UIDs (or one of its groups is in GIDs).
type Admission struct {
	UIDs []uint32
	GIDs []uint32
}

// Admits says whether p may use the socket.
func (a Admission) Admits(p Peer) bool {
	if p.UID == uint32(os.Geteuid()) || slices.Contains(a.UIDs, p.UID) || slices.Contains(a.GIDs, p.GID) {
		return true
	}
	for _, g := range p.Groups {
		if slices.Contains(a.GIDs, g) {
			return true
		}
	}
	return false
}
