package backend

import (
	"errors"
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/transfer"
)

// Scenario (issue 45.2): founder 1 publishes a segment name nobody can
// open (its engine listens on 127.0.0.2 but calls itself 127.0.0.3), so
// founders 0 and 2 fail to set the group up while founder 1 opens theirs.
// Group creation is all or nothing: every founder's NewGroup fails, with
// the same error, naming the rank that failed and why.
func TestGroupCreationIsAllOrNothing(t *testing.T) {
	const n = 3
	store := NewMemStore()
	rts := make([]*Runtime, n)
	for r := range n {
		rts[r] = NewRuntime()
		defer rts[r].Close()
	}
	bad, err := transfer.New(transfer.Config{LocalHostname: "127.0.0.3", BindAddress: "127.0.0.2", MetadataServer: "P2PHANDSHAKE"})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := rts[1].SetEngine(bad); err != nil {
		t.Fatal(err)
	}
	defer rts[1].SetEngine(nil)
	gs, errs := createGroups(rts[:n], n, GroupConfig{GroupID: "never", Store: store})
	for r := range n {
		if gs[r] != nil {
			gs[r].Close()
			t.Errorf("rank %d: the group was created although a founder failed", r)
		}
		if !errors.Is(errs[r], ErrPeer) || !strings.Contains(errs[r].Error(), "open segment of rank 1") {
			t.Errorf("rank %d: %v; want ErrPeer naming the segment of rank 1 that failed to open", r, errs[r])
		}
		if errs[r] != nil && errs[0] != nil && errs[r].Error() != errs[0].Error() {
			t.Errorf("rank %d failed with %q, rank 0 with %q: not the same error", r, errs[r], errs[0])
		}
	}
}
