//go:build !race

package pollread

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysRead is one read(2), a raw system call.
func sysRead(fd uintptr, p []byte) (int, unix.Errno) {
	n, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), errno
}

// sysSend is one send(2) with MSG_NOSIGNAL, a raw system call.
func sysSend(fd uintptr, p []byte) (int, unix.Errno) {
	n, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), unix.MSG_NOSIGNAL, 0, 0)
	return int(n), errno
}
