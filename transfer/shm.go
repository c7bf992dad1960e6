package transfer

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shmBuffer is memory backed by a memfd, so that peers on the same host can
// map it through /proc/<pid>/fd/<fd>.
type shmBuffer struct {
	fd    int
	inode uint64
	mem   []byte
}

// newShmBuffer allocates length bytes of shareable, zeroed memory; with
// hugePage > 0 on huge pages of that size, length rounded up to whole
// pages.
func newShmBuffer(length, hugePage uint64) (*shmBuffer, error) {
	flags := unix.MFD_CLOEXEC
	if hugePage > 0 {
		flags |= unix.MFD_HUGETLB | HugePageShift(hugePage)<<unix.MFD_HUGE_SHIFT
		length = RoundToPages(length, hugePage)
	}
	fd, err := unix.MemfdCreate("mooncake", flags)
	if err != nil {
		return nil, errorf(CodeMemory, err, "memfd_create")
	}
	fail := func(what string, err error) (*shmBuffer, error) {
		unix.Close(fd)
		return nil, errorf(CodeMemory, err, "%s %d bytes", what, length)
	}
	if err := unix.Ftruncate(fd, int64(length)); err != nil {
		return fail("ftruncate", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("fstat", err)
	}
	mem, err := unix.Mmap(fd, 0, int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		if hugePage > 0 { // the kernel reserves huge pages at mmap time
			unix.Close(fd)
			return nil, HugePageShortage(hugePage, length, err)
		}
		return fail("mmap", err)
	}
	return &shmBuffer{fd: fd, inode: st.Ino, mem: mem}, nil
}

func (b *shmBuffer) addr() uintptr { return addrOf(b.mem) }

func (b *shmBuffer) close() {
	unix.Munmap(b.mem)
	unix.Close(b.fd)
}

// version returns the shared uint64 at the start of a control page.
func (b *shmBuffer) version() *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&b.mem[0]))
}

// localHostID identifies this host and PID namespace: two engines with the
// same ID can open each other's memfds through /proc.
var localHostID = sync.OnceValue(func() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + ns
})

// mapPeerFile maps length bytes of a peer's memfd, checking that the file is
// still the one the descriptor named.
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
	return unix.Mmap(int(f.Fd()), 0, int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// peerShm is this engine's view of a same-host peer's shareable memory.
type peerShm struct {
	pidfd int
	ctl   []byte // the peer's control page
	// use is held shared while a copy touches a mapping and exclusively
	// while mappings are removed, so nothing is unmapped under a copy.
	use    sync.RWMutex
	mu     sync.Mutex        // guards maps
	maps   map[uint64][]byte // by inode
	closed bool              // guarded by use
	// seenAlive is when (shmClock) a poll of pidfd last found the peer
	// running: aliveRecently trusts it for aliveRecheck.
	seenAlive atomic.Int64
}

// aliveRecheck is how long a poll that found a peer running is trusted by
// the per-access check (aliveRecently): polling the pidfd costs a system
// call, which small messages would otherwise pay several times each.
const aliveRecheck = 100 * time.Microsecond

// shmClock is the monotonic time base of peerShm.seenAlive.
var shmClock = time.Now()

// openPeerShm prepares shared-memory access to the segment d, or returns an
// error when d cannot be reached that way (another host, no permission).
func openPeerShm(d *SegmentDesc) (*peerShm, error) {
	if d.HostID == "" || d.HostID != localHostID() || d.PID <= 0 || d.CtlFD <= 0 {
		return nil, fmt.Errorf("segment %q is not on this host", d.Name)
	}
	pidfd, err := unix.PidfdOpen(d.PID, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", d.PID, err)
	}
	ctl, err := mapPeerFile(d.PID, d.CtlFD, d.CtlInode, uint64(os.Getpagesize()))
	if err != nil {
		unix.Close(pidfd)
		return nil, err
	}
	return &peerShm{pidfd: pidfd, ctl: ctl, maps: map[uint64][]byte{}}, nil
}

// alive reports whether the peer process still runs.
func (p *peerShm) alive() bool {
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n == 0
	}
}

// aliveRecently is alive for the access paths: it polls at most once per
// aliveRecheck, so a peer that exited less than that ago may still be
// reported running (its memory is still mapped here, so an access then
// lands in memory nobody reads; waits notice the death through PeerExited,
// which always polls).
func (p *peerShm) aliveRecently() bool {
	now := int64(time.Since(shmClock))
	if seen := p.seenAlive.Load(); seen != 0 && now-seen < int64(aliveRecheck) {
		return true
	}
	if !p.alive() {
		return false
	}
	p.seenAlive.Store(now)
	return true
}

// version is the peer's current registry version.
func (p *peerShm) version() uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&p.ctl[0])).Load()
}

// buffer returns the mapping of the peer buffer b, mapping it on first use.
// The caller holds p.use shared for as long as it uses the mapping.
func (p *peerShm) buffer(pid int, b BufferDesc) ([]byte, error) {
	if p.closed {
		return nil, fmt.Errorf("peer mapping closed")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.maps[b.ShmInode]; ok && uint64(len(m)) >= b.Length {
		return m[:b.Length], nil
	}
	m, err := mapPeerFile(pid, b.ShmFD, b.ShmInode, b.Length)
	if err != nil {
		return nil, err
	}
	p.maps[b.ShmInode] = m
	return m, nil
}

// forget unmaps buffers whose inode is not in keep.
func (p *peerShm) forget(keep map[uint64]bool) {
	p.use.Lock()
	defer p.use.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	for ino, m := range p.maps {
		if !keep[ino] {
			unix.Munmap(m)
			delete(p.maps, ino)
		}
	}
}

func (p *peerShm) close() {
	p.forget(nil)
	p.use.Lock()
	defer p.use.Unlock()
	p.closed = true
	unix.Munmap(p.ctl)
	unix.Close(p.pidfd)
}
