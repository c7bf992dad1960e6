package transfer

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
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
	h, err := b.OpenSegment(a.Name())
	if err != nil {
		t.Fatal(err)
	}
	w := (*uint32)(unsafe.Pointer(&bytesAt(word, 4)[0]))
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
	binary.LittleEndian.PutUint32(bytesAt(src, 4), 7)
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
	h, err := b.OpenSegment(a.Name())
	if err != nil {
		t.Fatal(err)
	}
	ok, err := b.AccessRemote(h, uint64(buf)+100, 5, func(m []byte) { copy(m, "hello") })
	if err != nil || !ok {
		t.Fatalf("AccessRemote = %v, %v", ok, err)
	}
	if got := string(bytesAt(buf+100, 5)); got != "hello" {
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
	h, err := b.OpenSegment(a.Name())
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
