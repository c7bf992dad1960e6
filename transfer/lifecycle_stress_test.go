package transfer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/testutil"
)

// TestCloseUnderLoad closes engines, the target or the initiator in turn,
// over TCP and shm, while other goroutines run transfers against them.
// Every transfer ends (completed, or an error), every worker returns, and
// nothing crashes; run under -race. Rounds are bounded in number and time.
func TestCloseUnderLoad(t *testing.T) {
	const rounds, workers, n = 24, 4, 64 << 10
	stop := time.Now().Add(20 * time.Second)
	for round := 0; round < rounds && time.Now().Before(stop); round++ {
		forceTCP := round%2 == 0
		closeTarget := round%4 < 2
		target, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, ForceTCP: forceTCP, TransferTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		initiator, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: P2PHandshake, ForceTCP: forceTCP, TransferTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		user := anonMemory(t, n) // user-registered: TCP only
		if err := target.RegisterLocalMemory(gpu.AddrOf(user), n, ""); err != nil {
			t.Fatal(err)
		}
		managedAddr, err := target.AllocateManagedBuffer(n)
		if err != nil {
			t.Fatal(err)
		}
		local, err := initiator.AllocateManagedBuffer(workers * n)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				src := local + uintptr(w*n)
				dst := []uint64{uint64(gpu.AddrOf(user)), uint64(managedAddr)}[w%2]
				for i := 0; ; i++ {
					op := []Opcode{OpWrite, OpRead}[i%2]
					err := initiator.TransferSync(target.Name(), []Request{{Opcode: op, Source: src, TargetOffset: dst, Length: n / workers}})
					if err == nil {
						continue
					}
					// A transfer fails only once an engine is closing.
					if !errors.Is(err, ErrClosed) && !initiator.life.Closing() && !target.life.Closing() {
						t.Errorf("worker %d: transfer failed while both engines are open: %v", w, err)
					}
					return
				}
			}()
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		victim, other := target, initiator
		if !closeTarget {
			victim, other = initiator, target
		}
		if err := victim.Close(); err != nil {
			t.Fatal(err)
		}
		testutil.WaitOrFail(t, &wg, 3*initiator.Timeout(), fmt.Sprintf("round %d: transfers after Close", round))
		other.Close()
	}
}
