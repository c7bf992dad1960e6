package transfer

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/gpu"
)

// A waiter blocked on a word of its managed buffer is woken by a same-host
// peer that wrote the word and called WakeWord.
func TestWakeWordWakesWaiterOnSharedMemory(t *testing.T) {
	a, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	word, err := a.AllocateManagedBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	src, err := b.AllocateManagedBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.CachedSegment(a.Name())
	if err != nil {
		t.Fatal(err)
	}
	w := (*uint32)(unsafe.Pointer(&gpu.HostBytes(word, 4)[0]))
	woken := make(chan bool, 1)
	go func() {
		for atomic.LoadUint32(w) == 0 {
			// A long bound: the wake-up, not the timeout, must end the wait.
			if !WaitWord(word, 0, time.Minute) {
				woken <- false
				return
			}
		}
		woken <- true
	}()
	time.Sleep(10 * time.Millisecond) // let the waiter block (not required for correctness)
	binary.LittleEndian.PutUint32(gpu.HostBytes(src, 4), 7)
	if err := b.TransferSync(a.Name(), []Request{{Opcode: OpWrite, Source: src, TargetOffset: uint64(word), Length: 4}}); err != nil {
		t.Fatal(err)
	}
	ok, err := b.WakeWord(h, uint64(word))
	if err != nil || !ok {
		t.Fatalf("WakeWord = %v, %v; want delivered over shm", ok, err)
	}
	if !<-woken {
		t.Fatal("waiter timed out instead of being woken")
	}
	if got := atomic.LoadUint32(w); got != 7 {
		t.Fatalf("word = %d", got)
	}
}

var waitWordTestWord uint32 = 5 // a global: never moved by the runtime

func TestWaitWordTimesOutAndReturnsAtOnceWhenChanged(t *testing.T) {
	p := uintptr(unsafe.Pointer(&waitWordTestWord))
	if !WaitWord(p, 4, time.Minute) {
		t.Fatal("value differed, yet WaitWord reported a timeout")
	}
	if WaitWord(p, 5, time.Millisecond) {
		t.Fatal("nobody woke the word, yet WaitWord reported a wake-up")
	}
}

func TestAccessRemoteSeesPeerManagedBuffer(t *testing.T) {
	a, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	buf, err := a.AllocateManagedBuffer(8192)
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.CachedSegment(a.Name())
	if err != nil {
		t.Fatal(err)
	}
	ok, err := b.AccessRemote(h, uint64(buf)+100, 5, func(m []byte) { copy(m, "hello") })
	if err != nil || !ok {
		t.Fatalf("AccessRemote = %v, %v", ok, err)
	}
	if got := string(gpu.HostBytes(buf+100, 5)); got != "hello" {
		t.Fatalf("peer buffer holds %q", got)
	}
	// Outside the peer's managed buffers: not accessible, nothing touched.
	if ok, _ := b.AccessRemote(h, uint64(buf)+8190, 8, func([]byte) { t.Fatal("fn called") }); ok {
		t.Fatal("AccessRemote beyond the buffer reported access")
	}
}

func TestAccessRemoteOverTCPFallsBack(t *testing.T) {
	t.Setenv("MC_FORCE_TCP", "true")
	a, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	buf, err := a.AllocateManagedBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	h, err := b.CachedSegment(a.Name())
	if err != nil {
		t.Fatal(err)
	}
	ok, err := b.AccessRemote(h, uint64(buf), 8, func([]byte) { t.Fatal("fn called over TCP") })
	if ok || err != nil {
		t.Fatalf("AccessRemote over TCP = %v, %v; want false, nil", ok, err)
	}
	if ok, _ := b.WakeWord(h, uint64(buf)); ok {
		t.Fatal("WakeWord over TCP reported delivery")
	}
}

// Close while peers handshake and probe (a process dying in the middle of
// a collective): descriptors built concurrently must not touch the
// unmapped control page.
func TestCloseDuringHandshakes(t *testing.T) {
	for range 5 {
		a, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.AllocateManagedBuffer(4096); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 200 {
				_, _ = a.descriptorJSON()
				a.bumpVersion()
			}
		}()
		time.Sleep(50 * time.Microsecond)
		a.Close()
		<-done
	}
}

// An injected link failure fails transfers, direct access and probes to
// that peer only, and is refused without MC_TE_FAULT_INJECTION=1.
func TestInjectLinkFailure(t *testing.T) {
	a, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dst, err := b.AllocateManagedBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	src, err := a.AllocateManagedBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	h, err := a.CachedSegment(b.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(FaultInjectionEnv, "0")
	if err := a.InjectLinkFailure(b.Name(), true); err == nil {
		t.Fatal("injection accepted without the environment switch")
	}
	t.Setenv(FaultInjectionEnv, "1")
	if err := a.InjectLinkFailure(b.Name(), true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AccessRemote(h, uint64(dst), 8, func([]byte) {}); err == nil {
		t.Error("direct access through a broken link succeeded")
	}
	if err := a.Probe(b.Name()); err == nil {
		t.Error("probe through a broken link succeeded")
	}
	id, err := a.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	req := []Request{{Opcode: OpWrite, Source: src, Target: h, TargetOffset: uint64(dst), Length: 8}}
	if err := a.SubmitTransfer(id, req); err == nil {
		t.Error("transfer through a broken link was submitted")
	}
	if err := b.Probe(a.Name()); err != nil {
		t.Errorf("the other direction broke too: %v", err)
	}
	if err := a.InjectLinkFailure(b.Name(), false); err != nil {
		t.Fatal(err)
	}
	if err := a.Probe(b.Name()); err != nil {
		t.Errorf("probe after repairing the link: %v", err)
	}
	if err := a.SubmitTransfer(id, req); err != nil {
		t.Errorf("transfer after repairing the link: %v", err)
	}
	if _, err := a.WaitBatch(id); err != nil {
		t.Error(err)
	}
}

// Once a handshake with a same-host peer has failed (the probe of a
// stopped process, whose port accepts and never answers), the segment is
// due for a new descriptor fetch, which AccessRemote waits for (the
// handshake's timeout: a minute here). AccessMapped writes through the
// view the engine holds at once (the collectives' fence for a stopped
// rank, backend/fence.go).
func TestAccessMappedDoesNotWaitForAStoppedPeer(t *testing.T) {
	target, e, remote, _ := enginePair(t, false)
	dir := &gatedDir{Directory: e.dir}
	e.dir = dir
	seg, err := e.OpenSegment(target.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	addr := uint64(gpu.AddrOf(remote))
	if ok, err := e.AccessMapped(seg.Handle(), addr, 5, func(m []byte) { copy(m, "first") }); !ok || err != nil {
		t.Fatalf("AccessMapped of a live peer = %v, %v", ok, err)
	}
	if string(remote[:5]) != "first" {
		t.Fatalf("peer buffer holds %q", remote[:5])
	}
	silent, _ := silentListener(t)
	dir.silent.Store(&silent)
	s, err := e.segment(seg.Handle())
	if err != nil {
		t.Fatal(err)
	}
	s.invalidate() // what a failed probe does
	ok, err := e.AccessMapped(seg.Handle(), addr, 6, func(m []byte) { copy(m, "second") })
	if !ok || err != nil {
		t.Fatalf("AccessMapped after the failed handshake = %v, %v; want the view held", ok, err)
	}
	if string(remote[:6]) != "second" {
		t.Fatalf("peer buffer holds %q", remote[:6])
	}
}
