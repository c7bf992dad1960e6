package backend

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// recvAny hands out messages in the order they arrive: rank 0 waits for
// ranks 1 and 2, rank 2 sends at once and rank 1 only once rank 0 has
// taken rank 2's message.
func TestRecvAnyTakesMessagesInArrivalOrder(t *testing.T) {
	tookFirst := make(chan struct{})
	ranks(t, 3, testSlot, func(t *testing.T, g *Group) {
		runColl(t, g, "arrival order", func() error {
			switch g.Rank() {
			case 0:
				pending := []int{1, 2}
				var order []int
				for len(pending) > 0 {
					p, s, err := g.recvAny(chColl, &pending)
					if err != nil {
						return err
					}
					if want := []byte{byte(p), 0xab}; !bytes.Equal(s[:2], want) {
						t.Errorf("message from rank %d reads %x, want %x", p, s[:2], want)
					}
					order = append(order, p)
					if p == 2 {
						close(tookFirst)
					}
				}
				g.release(chColl, 1, 2)
				if fmt.Sprint(order) != "[2 1]" {
					t.Errorf("recvAny took %v, want [2 1]", order)
				}
			case 1:
				select {
				case <-tookFirst:
				case <-time.After(10 * time.Second):
					t.Errorf("rank 0 did not take rank 2's message while rank 1's was missing")
				}
				return g.send(chColl, []out{{peer: 0, data: []byte{1, 0xab}}})
			case 2:
				return g.send(chColl, []out{{peer: 0, data: []byte{2, 0xab}}})
			}
			return nil
		})
	})
}

// A rank that dies during a multi-chunk all_to_all (while the others wait
// for its chunks among others') fails the op with it named, or the op is
// complete or re-run among the survivors, and the survivors go on.
func TestDeathDuringMultiChunkAllToAll(t *testing.T) {
	const block = 4 << 20 // per peer, in 64 KiB slots: 64 chunks each
	sizes := []int{block, block, block, block}
	in := func(r int) []byte {
		b := make([]byte, 4*block)
		for p := range 4 {
			copy(b[p*block:], bytes.Repeat([]byte{byte(16*r + p)}, block))
		}
		return b
	}
	died := make(chan struct{})
	var opDone atomic.Bool
	die := func(g *Group) {
		w, _ := g.AllToAll(in(g.Rank()), make([]byte, 4*block), sizes, sizes)
		time.Sleep(5 * time.Millisecond)
		opDone.Store(w != nil && w.Completed())
		close(died)
	}
	deathScenario(t, 4, 2, 64<<10, die, func(t *testing.T, g *Group) {
		me := g.Rank()
		outBuf := bytes.Repeat([]byte{0xee}, 4*block)
		w, err := g.AllToAll(in(me), outBuf, sizes, sizes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Wait(0); err != nil {
			t.Fatalf("rank %d: all_to_all during the death raised: %v", me, err)
		}
		<-died
		switch {
		case w.LocalSuccess():
			for _, p := range []int{0, 1, 3} {
				if !bytes.Equal(outBuf[p*block:(p+1)*block], bytes.Repeat([]byte{byte(16*p + me)}, block)) {
					t.Errorf("rank %d: all_to_all that succeeded has a wrong block from rank %d", me, p)
				}
			}
			if opDone.Load() && !bytes.Equal(outBuf[2*block:3*block], bytes.Repeat([]byte{byte(32 + me)}, block)) {
				t.Errorf("rank %d: all_to_all completed before the death has a wrong block from rank 2", me)
			}
		case fmt.Sprint(w.FailedRanks()) != "[2]":
			t.Errorf("rank %d: all_to_all during the death: failed %v, want [2]", me, w.FailedRanks())
		}
		survivorsContinue(t, g)
	})
}
