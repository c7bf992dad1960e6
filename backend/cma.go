package backend

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/nodeid"
	"golang.org/x/sys/unix"
)

// Cross-memory attach (CMA): ranks on one host read a peer's source
// buffer straight into their output with process_vm_readv, one copy per
// byte and no staging slot. A peer's memory is only ever read.
//
// Whether a group reads its peers this way is agreed once per collective
// base and set of active ranks, at the first collective that could use it
// (cmaOn): every active rank sends every other its pid, uid, host identity
// and the address of a random nonce; each tries to read each peer's nonce
// and sends back whether every read matched. The group uses CMA only when
// every rank could read every peer, so every rank picks the same
// algorithm. MC_PG_CMA=0 makes a rank answer no (the group falls back to
// the copying algorithms), as do a Yama ptrace_scope of 3, a peer without
// a direct view of its buffer (another host, or MC_FORCE_TCP), another
// uid, and a failed or mismatching probe read.

// cmaMinBytes is the smallest all_to_all block a rank reads with CMA (and
// the smallest block allGatherCMA reads; chooseAllGather calls it for far
// larger ones); smaller blocks travel in the message itself (a read costs a
// system call and the sender's wait for the reader's acknowledgement).
const cmaMinBytes = 32 << 10

// cmaState is the group's agreement about CMA; owned by the collective FIFO.
type cmaState struct {
	agreed bool   // on and pids are valid for base and act
	base   uint64 // the collective base it was agreed in
	act    []int  // the active ranks it was agreed over
	on     bool
	pids   []int // per slot, of the agreed peers
	nonce  []byte
	// scratch holds an input that overlaps the output (read by peers while
	// this rank writes its output).
	scratch []byte
}

// cmaHelloLen is the size of the handshake message: magic, pid, uid,
// willing flag, host identity, nonce address, nonce.
const (
	cmaMagic    = 0x31414d43 // "CMA1"
	cmaHelloLen = 4 + 4 + 4 + 4 + 8 + 8 + 16
	cmaDescLen  = 4 + 4 + 8 + 8
	cmaDescMark = 0x44414d43 // "CMAD"
)

// cmaRead reads len(dst) bytes at addr of peer's process pid, for the
// probe and for the data; tests replace it to simulate a kernel that
// refuses or a read that fails.
var cmaRead = func(g *Group, peer, pid int, addr uintptr, dst []byte) error {
	return processRead(pid, addr, dst)
}

// processRead copies len(dst) bytes at addr in process pid into dst,
// looping over partial reads; a read that makes no progress is an error.
func processRead(pid int, addr uintptr, dst []byte) error {
	for len(dst) > 0 {
		local := []unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(len(dst))
		remote := []unix.RemoteIovec{{Base: addr, Len: len(dst)}}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return err
		}
		if n <= 0 {
			return syscall.EFAULT
		}
		dst, addr = dst[n:], addr+uintptr(n)
	}
	return nil
}

// CMAReason says why this process would refuse to read its peers with
// CMA ("" when it would not refuse): the environment variable or Yama.
func CMAReason() string {
	if envvars.PGCMA.Value() == "0" {
		return "MC_PG_CMA=0"
	}
	if s := ptraceScope(); s == "3" {
		return "kernel.yama.ptrace_scope=3 (no process may read another)"
	}
	return ""
}

// ptraceScope is the Yama ptrace scope ("" without Yama).
func ptraceScope() string {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// hostIdentity hashes this process's node id (internal/nodeid: the kernel
// and pid namespace it runs in): two ranks may read each other by pid only
// when both match.
func hostIdentity() uint64 {
	h := fnv.New64a()
	h.Write([]byte(nodeid.ID()))
	return h.Sum64()
}

// cmaOn reports whether the current collective reads its peers with CMA,
// agreeing on it with the active ranks first when the base or the active
// ranks changed since the last agreement.
func (g *Group) cmaOn() (bool, error) {
	c := &g.cma
	if c.agreed && c.base == g.collBase && slices.Equal(c.act, g.act) {
		return c.on, nil
	}
	c.agreed = false
	if len(g.act) < 2 {
		return false, nil
	}
	on, err := g.cmaHandshake()
	if err != nil {
		return false, err
	}
	c.agreed, c.base, c.act, c.on = true, g.collBase, append(c.act[:0], g.act...), on
	return on, nil
}

// cmaHandshake runs the two rounds of the agreement (see the top of this
// file) over the active ranks and returns the group's answer.
func (g *Group) cmaHandshake() (bool, error) {
	c := &g.cma
	if c.nonce == nil {
		c.nonce = make([]byte, 16)
		if _, err := rand.Read(c.nonce); err != nil {
			return false, err
		}
	}
	if c.pids == nil {
		c.pids = make([]int, g.size)
	}
	willing := uint32(0)
	if CMAReason() == "" {
		willing = 1
	}
	host := hostIdentity()
	hello := make([]byte, cmaHelloLen)
	binary.LittleEndian.PutUint32(hello[0:], cmaMagic)
	binary.LittleEndian.PutUint32(hello[4:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint32(hello[8:], uint32(os.Getuid()))
	binary.LittleEndian.PutUint32(hello[12:], willing)
	binary.LittleEndian.PutUint64(hello[16:], host)
	binary.LittleEndian.PutUint64(hello[24:], uint64(uintptr(unsafe.Pointer(&c.nonce[0]))))
	copy(hello[32:], c.nonce)
	others := g.othersInRingOrder()
	if err := g.sendAll(others, hello); err != nil {
		return false, err
	}
	ok := willing == 1
	for _, p := range others {
		s, err := g.recv(chColl, p)
		if err != nil {
			return false, err
		}
		m := s[:cmaHelloLen]
		pid := int(binary.LittleEndian.Uint32(m[4:]))
		peerOK := binary.LittleEndian.Uint32(m[0:]) == cmaMagic &&
			binary.LittleEndian.Uint32(m[8:]) == uint32(os.Getuid()) &&
			binary.LittleEndian.Uint32(m[12:]) == 1 &&
			binary.LittleEndian.Uint64(m[16:]) == host && g.directView(p)
		if peerOK && ok {
			got := make([]byte, 16)
			err := cmaRead(g, p, pid, uintptr(binary.LittleEndian.Uint64(m[24:])), got)
			peerOK = err == nil && string(got) == string(m[32:48])
		}
		g.release(chColl, p)
		ok = ok && peerOK
		c.pids[p] = pid
	}
	// Round two: every rank's verdict; the group's is their conjunction.
	verdict := []byte{0}
	if ok {
		verdict[0] = 1
	}
	if err := g.sendAll(others, verdict); err != nil {
		return false, err
	}
	for _, p := range others {
		s, err := g.recv(chColl, p)
		if err != nil {
			return false, err
		}
		ok = ok && s[0] == 1
		g.release(chColl, p)
	}
	return ok, nil
}

// directView reports whether this rank maps peer's group buffer (same
// host, shared memory), the precondition for reading it by pid.
func (g *Group) directView(peer int) bool {
	p := g.peer(peer)
	if p == nil {
		return false
	}
	ok, err := g.engine.AccessRemote(p.seg, p.base, 8, func([]byte) {})
	return err == nil && ok
}

// sendAll sends data as one message to each of peers.
func (g *Group) sendAll(peers []int, data []byte) error {
	msgs := make([]out, 0, len(peers))
	for _, p := range peers {
		msgs = append(msgs, out{peer: p, data: data})
	}
	return g.send(chColl, msgs)
}

// cmaDesc is the message that lends n bytes at addr of this process.
func cmaDesc(b []byte, n int) []byte {
	d := make([]byte, cmaDescLen)
	binary.LittleEndian.PutUint32(d[0:], cmaDescMark)
	binary.LittleEndian.PutUint64(d[8:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))))
	binary.LittleEndian.PutUint64(d[16:], uint64(n))
	return d
}

// cmaReadFrom reads len(dst) bytes that peer lent with the descriptor in
// its message slot s into dst. A descriptor of another length is the
// callers' mismatch (ErrInvalid); a refused or failed read is the peer's
// failure.
func (g *Group) cmaReadFrom(peer int, s, dst []byte) error {
	if binary.LittleEndian.Uint32(s[0:]) != cmaDescMark {
		return fmt.Errorf("%w: rank %d sent no buffer to read (mismatched collective sizes?)", ErrInvalid, peer)
	}
	if n := binary.LittleEndian.Uint64(s[16:]); n != uint64(len(dst)) {
		return fmt.Errorf("%w: rank %d lends %d bytes, this rank expects %d", ErrInvalid, peer, n, len(dst))
	}
	if len(dst) == 0 {
		return nil
	}
	if err := cmaRead(g, peer, g.cma.pids[peer], uintptr(binary.LittleEndian.Uint64(s[8:])), dst); err != nil {
		return peerFailure(peer, "read the buffer of %s (process_vm_readv): %v", g.describe([]int{peer}), err)
	}
	return nil
}

// awaitReaders waits until each of peers acknowledged this rank's last
// message to it: the buffer it lent stays valid and unchanged until then.
// It ends the op: a failure here finds the op done on this rank (tail).
func (g *Group) awaitReaders(peers []int) error {
	for _, p := range peers {
		if err := g.waitAtLeast(chColl, fAck, p, g.sent[chColl][p], g.collTimeout()); err != nil {
			return tail(err)
		}
	}
	return nil
}

// cmaSource is what peers read of in: in itself, or a copy in the group's
// scratch buffer when in overlaps out outside keep (the part of out this
// rank leaves alone while peers read).
func (g *Group) cmaSource(in, out, keep []byte) []byte {
	if !overlap(in, out) || len(in) == 0 || unsafe.SliceData(in) == unsafe.SliceData(keep) && len(in) <= len(keep) {
		return in
	}
	if cap(g.cma.scratch) < len(in) {
		g.cma.scratch = make([]byte, len(in))
	}
	s := g.cma.scratch[:len(in)]
	copy(s, in)
	return s
}

func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}
