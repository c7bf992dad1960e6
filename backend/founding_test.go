package backend

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// Scenario (issue 45.5): founder `bad` cannot start its engine (it is told
// to publish 192.0.2.1, an address of no interface here), so it fails
// before it can join. Every founder's NewGroup fails with the same error,
// naming it, at once: before, the others waited out MC_PG_INIT_TIMEOUT
// (here 20 s) and failed with a deadline that named nobody. Founder 0
// fails through the store (it would have started the coordinator), any
// other through the coordinator.
func TestAFounderThatCannotStartFailsEveryFounder(t *testing.T) {
	t.Setenv("MC_PG_INIT_TIMEOUT", "20")
	for _, bad := range []int{0, 2} {
		t.Run(map[int]string{0: "rank0", 2: "rank2"}[bad], func(t *testing.T) {
			const n = 3
			store := NewMemStore()
			rts := make([]*Runtime, n)
			for r := range n {
				rts[r] = NewRuntime()
				defer rts[r].Close()
			}
			if err := rts[bad].SetHostIP("192.0.2.1"); err != nil {
				t.Fatal(err)
			}
			gs, errs := createGroups(rts[:n], n, GroupConfig{GroupID: "g", Store: store})
			want := `group "g" was not created: rank ` + map[int]string{0: "0", 2: "2"}[bad] + " failed to set it up: start transfer engine"
			for r := range n {
				if gs[r] != nil {
					gs[r].Close()
					t.Errorf("rank %d: the group was created although a founder failed", r)
				}
				if !errors.Is(errs[r], ErrPeer) || !strings.Contains(errs[r].Error(), want) {
					t.Errorf("rank %d: %v; want ErrPeer with %q", r, errs[r], want)
				}
				if errs[r] != nil && errs[bad] != nil && errs[r].Error() != errs[bad].Error() {
					t.Errorf("rank %d failed with %q, rank %d with %q: not the same error", r, errs[r], bad, errs[bad])
				}
			}
		})
	}
}

// Scenario (issue 45.5): founder 2 joins, then dies (its engine closes)
// before it reports its set-up. The others fail at once with the same
// error naming it: before, they waited out MC_PG_INIT_TIMEOUT (20 s here)
// and failed with a deadline.
func TestAFounderThatDiesBeforeItIsReadyFailsEveryFounder(t *testing.T) {
	t.Setenv("MC_PG_INIT_TIMEOUT", "20")
	const n = 3
	store := NewMemStore()
	rts := make([]*Runtime, n)
	for r := range n {
		rts[r] = NewRuntime()
		defer rts[r].Close()
	}
	gs := make([]*Group, n-1)
	errs := make([]error, n-1)
	var wg sync.WaitGroup
	for r := range n - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[r], errs[r] = rts[r].NewGroup(GroupConfig{Rank: r, Size: n, GroupID: "g", Store: store})
		}()
	}
	// Founder 2, by hand: joins with its engine's endpoint, never Ready.
	e, err := rts[2].Engine()
	if err != nil {
		t.Fatal(err)
	}
	client, err := rts[2].coordinator(store, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	lay := groupLayout(GroupConfig{}, n)
	base, err := e.AllocateManagedBuffer(uint64(lay.total))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rts[2].join(client, &coordpb.JoinRequest{GroupId: "g", Rank: 2, Size: n, MaxSize: n, Layout: lay.key(),
		Endpoint: &coordpb.Endpoint{Segment: e.Name(), Buffer: uint64(base), BufferLen: uint64(lay.total)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the others open its segment
	rts[2].Close()                     // and it dies
	wg.Wait()
	for r := range n - 1 {
		if gs[r] != nil {
			gs[r].Close()
			t.Errorf("rank %d: the group was created although a founder died", r)
		}
		if !errors.Is(errs[r], ErrPeer) || !strings.Contains(errs[r].Error(), "rank 2 ") || !strings.Contains(errs[r].Error(), "was not created") {
			t.Errorf("rank %d: %v; want ErrPeer: the group was not created, naming rank 2", r, errs[r])
		}
	}
	if errs[0] != nil && errs[1] != nil && errs[0].Error() != errs[1].Error() {
		t.Errorf("rank 0 failed with %q, rank 1 with %q: not the same error", errs[0], errs[1])
	}
}
