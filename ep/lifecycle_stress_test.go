package ep

import (
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
)

// stressRank runs rounds on b until it is closed: a dispatch and a
// combine received at once, the same received asynchronously, or two
// dispatches outstanding (the second one's send deferred) received in
// order. Any error but ErrClosed fails the test.
func stressRank(t *testing.T, b *Buffer, in rankIn, R, n, h, e, k int) {
	recv := func(op *Op, async bool) error {
		if async {
			op.RecvAsync()
			return op.Wait()
		}
		return op.Recv()
	}
	for i := 0; ; i++ {
		act := []int32{1, 1}
		d := newDispatch(in, R, n, h, e, k, i%2 == 1, act, 50_000)
		op, err := b.DispatchSend(&d)
		switch {
		case err != nil:
		case i%3 == 2:
			d2 := newDispatch(in, R, n, h, e, k, false, act, 50_000)
			var op2 *Op
			if op2, err = b.DispatchSend(&d2); err == nil {
				err = errors.Join(op.Recv(), op2.Recv())
			} else {
				op.Recv()
			}
		default:
			if err = recv(op, i%3 == 1); err != nil {
				break
			}
			c := CombineArgs{X: identityExperts(&d, R), TopkIdx: in.idx, Weights: in.w, T: in.t, K: k, N: n, H: h, E: e,
				Active: act, TimeoutUs: 50_000, SrcInfo: d.SrcInfo, LayoutRange: d.LayoutRange, Out: make([]uint16, in.t*h)}
			if op, err = b.CombineSend(&c); err == nil {
				err = recv(op, i%3 == 1)
			}
		}
		if errors.Is(err, ErrClosed) {
			return
		}
		if err != nil {
			t.Errorf("rank %d: %v", b.Rank(), err)
			return
		}
	}
}

// TestCloseUnderLoad closes both ranks' buffers, one after the other, while
// each runs dispatch and combine (sync, async and hook receives) on its own
// goroutine, over shm and TCP. Every call returns (nil or ErrClosed), no
// receive hangs, nothing crashes; run under -race. Bounded in rounds and
// time.
func TestCloseUnderLoad(t *testing.T) {
	const R, N, H, E, K, rounds = 2, 8, 128, 4, 2, 16
	stop := time.Now().Add(20 * time.Second)
	rng := rand.New(rand.NewSource(7))
	for round := 0; round < rounds && time.Now().Before(stop); round++ {
		bufs := group(t, R, SizeHint(N, H, R, E), round%2 == 1)
		in := makeInputs(rng, R, N, H, E, K)
		var wg sync.WaitGroup
		for r, b := range bufs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stressRank(t, b, in[r], R, N, H, E, K)
			}()
		}
		time.Sleep(time.Duration(rng.Intn(30)) * time.Millisecond)
		first := round % R
		for _, r := range []int{first, 1 - first} {
			if err := bufs[r].Close(); err != nil {
				t.Fatal(err)
			}
		}
		testutil.WaitOrFail(t, &wg, 10*time.Second, fmt.Sprintf("round %d: calls after Close", round))
	}
}
