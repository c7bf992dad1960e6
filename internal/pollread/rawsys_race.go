//go:build race

package pollread

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Under the race detector reads and writes go through the syscall
// package: its Read and Write tell the detector that a write to a socket
// happens before the read that receives it. Raw calls carry no such edge,
// so an in-process test whose one side writes memory and then replies,
// and whose other side reads that memory after the reply, was reported as
// a race. Only the scheduler's bookkeeping differs from the raw calls;
// write(2) instead of send(2) is safe because Go ignores SIGPIPE on
// sockets.

// sysRead is one read(2) through the syscall package.
func sysRead(fd uintptr, p []byte) (int, unix.Errno) {
	n, err := syscall.Read(int(fd), p)
	return max(n, 0), errnoOf(err)
}

// sysSend is one write(2) through the syscall package.
func sysSend(fd uintptr, p []byte) (int, unix.Errno) {
	n, err := syscall.Write(int(fd), p)
	return max(n, 0), errnoOf(err)
}

func errnoOf(err error) unix.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.Errno(errno)
	}
	return 0
}
