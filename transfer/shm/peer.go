package shm

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/internal/nodeid"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// HostID identifies this node (internal/nodeid: boot id and PID
// namespace): two engines with the same ID can open each other's memfds
// through /proc.
var HostID = nodeid.ID

// mapPeerFile maps length bytes of a peer's memfd, checking that the file
// is still the one the descriptor named.
func mapPeerFile(pid, fd int, inode, length uint64) ([]byte, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Ino != inode || uint64(st.Size) < length {
		return nil, fmt.Errorf("peer file %d/%d changed (inode %d, size %d)", pid, fd, st.Ino, st.Size)
	}
	// The peer owns the file: unless it can no longer shrink, a truncate
	// would turn this process's next copy into a SIGBUS.
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("peer file %d/%d is not sealed against shrinking (seals %#x, %v)", pid, fd, seals, err)
	}
	return unix.Mmap(int(f.Fd()), 0, int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// mappings is this engine's view of a same-host peer's shareable memory.
type mappings struct {
	pid   int
	pidfd int
	stat  int    // /proc/<pid>/stat, read for the exiting flag (exiting)
	ctl   []byte // the peer's control page
	// Every copy through a mapping pins the mappings; removing mappings
	// first stops new pins (a view then reports false and the engine
	// takes another transport) and waits for the pins taken to drain, so
	// nothing is unmapped under a copy. Pins are counts, not locks: a
	// view's callback may open another view of the same peer while a
	// removal is pending without deadlocking (issue 33 #6).
	pinMu    sync.Mutex
	pins     int               // guarded by pinMu
	removing int               // removals waiting or running; guarded by pinMu
	closed   bool              // guarded by pinMu
	drained  *sync.Cond        // on pinMu
	mu       sync.Mutex        // guards maps
	maps     map[uint64][]byte // by inode
	// seenAlive is when (on clock) a poll of pidfd last found the peer
	// running: aliveRecently trusts it for AliveRecheck.
	seenAlive atomic.Int64
}

// AliveRecheck is how long a poll that found a peer running is trusted by
// Conn.Check: polling the pidfd costs a system call, which every small
// message would otherwise pay several times (an 8-byte collective between
// two ranks makes a few accesses every 20-30 µs, so 100 µs still polled
// every few ops). A peer that exited less than
// that ago may still be reported running; its memory is still mapped here,
// so an access then lands in memory nobody reads.
const AliveRecheck = time.Millisecond

// clock is the monotonic time base of mappings.seenAlive.
var clock = time.Now()

// openMappings prepares shared-memory access to the segment d, or returns
// an error when d cannot be reached that way (another host, no
// permission).
func openMappings(d *transport.SegmentDesc) (*mappings, error) {
	pidfd, err := unix.PidfdOpen(d.PID, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", d.PID, err)
	}
	// Opened after the pidfd: the pid cannot name another process while
	// the pidfd finds it running.
	stat, err := unix.Open(fmt.Sprintf("/proc/%d/stat", d.PID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(pidfd)
		return nil, fmt.Errorf("open /proc/%d/stat: %w", d.PID, err)
	}
	ctl, err := mapPeerFile(d.PID, d.CtlFD, d.CtlInode, uint64(os.Getpagesize()))
	if err != nil {
		unix.Close(pidfd)
		unix.Close(stat)
		return nil, err
	}
	m := &mappings{pid: d.PID, pidfd: pidfd, stat: stat, ctl: ctl, maps: map[uint64][]byte{}}
	m.drained = sync.NewCond(&m.pinMu)
	return m, nil
}

// alive reports whether the peer process still runs (its pidfd is not
// readable). The access path asks this: a peer's memory stays mapped here
// and readable after its death, and what it lent before dying is still
// there, so accesses are refused only once the process is gone.
func (p *mappings) alive() bool {
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n == 0
	}
}

// exited reports, looking now, whether the peer process is gone or has
// begun to exit: its pidfd turns readable only once the kernel has torn
// the process down (its memory unmapped first: hundreds of milliseconds
// for a large process, seconds under load), so the exiting flag is read
// too. For the questions whether the peer will ever act again (a wait for
// it, a probe, a send's delivery).
func (p *mappings) exited() bool {
	return !p.alive() || exiting(p.stat)
}

// pfExiting is the kernel's PF_EXITING task flag (include/linux/sched.h),
// set as a task begins to exit.
const pfExiting = 0x4

// exiting reports whether the process whose /proc/<pid>/stat is open as
// fd has begun to exit (or is gone: the read fails once it is reaped).
func exiting(fd int) bool {
	var buf [512]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil || n <= 0 {
		return true
	}
	flags, ok := statFlags(buf[:n])
	return !ok || flags&pfExiting != 0
}

// statFlags returns the flags field (the ninth) of a /proc/<pid>/stat
// line. The command name (second field) is in parentheses and may hold
// spaces and parentheses itself: fields are counted after its last ')'.
func statFlags(line []byte) (uint64, bool) {
	i := bytes.LastIndexByte(line, ')')
	if i < 0 {
		return 0, false
	}
	// After the name: state ppid pgrp session tty_nr tpgid flags.
	f := bytes.Fields(line[i+1:])
	if len(f) < 7 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(f[6]), 10, 64)
	return v, err == nil
}

// aliveRecently is alive, polling at most once per AliveRecheck.
func (p *mappings) aliveRecently() bool {
	now := int64(time.Since(clock))
	if seen := p.seenAlive.Load(); seen != 0 && now-seen < int64(AliveRecheck) {
		return true
	}
	if !p.alive() {
		return false
	}
	p.seenAlive.Store(now)
	return true
}

// version is the peer's current registry version.
func (p *mappings) version() uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&p.ctl[0])).Load()
}

// pin begins a use of the mappings, or reports false while they are being
// removed or once they are closed. It never waits.
func (p *mappings) pin() bool {
	p.pinMu.Lock()
	defer p.pinMu.Unlock()
	if p.closed || p.removing > 0 {
		return false
	}
	p.pins++
	return true
}

// pinOpen is pin for uses that only read the control page and the pidfd,
// which a removal of buffer mappings leaves in place: it fails only once
// the mappings are closed.
func (p *mappings) pinOpen() bool {
	p.pinMu.Lock()
	defer p.pinMu.Unlock()
	if p.closed {
		return false
	}
	p.pins++
	return true
}

// unpin ends a use begun by pin or pinOpen.
func (p *mappings) unpin() {
	p.pinMu.Lock()
	defer p.pinMu.Unlock()
	p.pins--
	if p.pins == 0 {
		p.drained.Broadcast()
	}
}

// exclude stops new pins and waits until the pins taken have ended; the
// caller then owns the mappings until include.
func (p *mappings) exclude() {
	p.pinMu.Lock()
	defer p.pinMu.Unlock()
	p.removing++
	for p.pins > 0 {
		p.drained.Wait()
	}
}

// include ends an exclude.
func (p *mappings) include() {
	p.pinMu.Lock()
	p.removing--
	p.pinMu.Unlock()
}

// buffer returns the mapping of the peer buffer b, mapping it on first
// use. The caller holds a pin for as long as it uses the mapping.
func (p *mappings) buffer(b transport.BufferDesc) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.maps[b.ShmInode]; ok && uint64(len(m)) >= b.Length {
		return m[:b.Length], nil
	}
	m, err := mapPeerFile(p.pid, b.ShmFD, b.ShmInode, b.Length)
	if err != nil {
		return nil, err
	}
	p.maps[b.ShmInode] = m
	return m, nil
}

// forget unmaps buffers whose inode is not in keep.
func (p *mappings) forget(keep map[uint64]bool) {
	p.exclude()
	defer p.include()
	p.mu.Lock()
	defer p.mu.Unlock()
	for ino, m := range p.maps {
		if !keep[ino] {
			unix.Munmap(m)
			delete(p.maps, ino)
		}
	}
}

func (p *mappings) close() {
	p.exclude()
	defer p.include()
	p.pinMu.Lock()
	already := p.closed
	p.closed = true
	p.pinMu.Unlock()
	p.mu.Lock()
	for ino, m := range p.maps {
		unix.Munmap(m)
		delete(p.maps, ino)
	}
	p.mu.Unlock()
	if already {
		return
	}
	unix.Munmap(p.ctl)
	unix.Close(p.pidfd)
	unix.Close(p.stat)
}
