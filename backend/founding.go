package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/backend/coordpb"
)

// A founder that fails before it can join (its engine refuses the address
// it would publish, a loopback one while MASTER_ADDR is another host's; it
// cannot start an engine at all) still takes part in the founding, so that
// every founder's init fails at once with the same error instead of waiting
// out MC_PG_INIT_TIMEOUT for it:
//
//   - rank 0, which starts the coordinator (none named by
//     MC_PG_COORDINATOR), publishes the error in the rendezvous store
//     where the coordinator's address would go (failedMark + the error);
//     every other founder reads it there, says so (seenKey), and fails
//     with it; rank 0 fails once all have (the store may live in its
//     process), or after failureLinger;
//   - any other rank (or rank 0 with a coordinator of its own) joins with
//     an empty endpoint, which the others do not open, and reports the
//     error with Ready: the founding round fails, and every founder gets
//     that same error (coordinator_ready.go).
//
// The error reads as the coordinator words a failed round's: group "ID" was
// not created: rank R failed to set it up: <the founder's error>.
//
// A founder that dies after it joined and before it reported (Ready) would
// leave the others waiting out MC_PG_INIT_TIMEOUT too: a founder waiting
// for the round probes the others' engines every foundersProbe, and when
// one no longer answers it withdraws its report and reports that instead,
// which fails the round for every founder with those words.

// errWithdrawn: a founder gave up waiting for the round (readyCtx's
// context ended) and its report was withdrawn.
var errWithdrawn = errors.New("the set-up report was withdrawn")

// failureLinger bounds how long a failed rank 0 waits for the other
// founders to read its error from the store.
const failureLinger = 10 * time.Second

// seenKey is the Store key founder rank sets once it has read rank 0's
// failure.
func seenKey(rank int) string { return fmt.Sprintf("%s_failure_seen_%d", CoordinatorKey, rank) }

// foundersProbe is how often a founder waiting for the others to be ready
// probes them.
const foundersProbe = time.Second

// failedMark prefixes the value under CoordinatorKey of a founding rank 0
// that could not start the group.
const failedMark = "failed: "

// failFounding makes setup, a founder's failure before it joined, every
// founder's (see above) and returns the error this rank's init fails with.
// When the others cannot be told (no coordinator reachable), it is setup.
func (rt *Runtime) failFounding(cfg GroupConfig, slots int, setup error) error {
	if cfg.Extension {
		return setup
	}
	text := fmt.Sprintf("group %q was not created: rank %d failed to set it up: %v", cfg.GroupID, cfg.Rank, setup)
	if cfg.Rank == 0 {
		rt.mu.Lock()
		bootstrapped := rt.link != nil
		rt.mu.Unlock()
		if place, err := coordinatorPlacement(rt.coordBin); err == nil && place.Addr == "" && !bootstrapped {
			if cfg.Store.Set(CoordinatorKey, []byte(failedMark+text)) != nil {
				return setup
			}
			// The store may live in this process (torch's TCPStore of
			// rank 0): stay until every founder has read the error, or
			// failureLinger has passed.
			deadline := time.Now().Add(failureLinger)
			for r := 1; r < cfg.Size && time.Now().Before(deadline); r++ {
				cfg.Store.Get(seenKey(r), time.Until(deadline))
			}
			return fmt.Errorf("%w: %s", ErrPeer, text)
		}
	}
	client, err := rt.coordinator(cfg.Store, cfg.Rank, false)
	if err != nil {
		return setup
	}
	if _, err := rt.join(client, &coordpb.JoinRequest{
		GroupId:  cfg.GroupID,
		Rank:     int32(cfg.Rank),
		Size:     int32(cfg.Size),
		MaxSize:  int32(slots),
		Endpoint: &coordpb.Endpoint{},
		Layout:   groupLayout(cfg, slots).key(),
		Manual:   cfg.Manual,
	}); err != nil {
		return setup
	}
	return rt.ready(client, cfg.GroupID, cfg.Rank, setup)
}

// awaitFounders is ready (setup nil: success) while the others set the
// group up, withdrawing a success to report a founder that silent (the
// probe of every other founder, run every foundersProbe) finds gone.
func (rt *Runtime) awaitFounders(client coordpb.CoordinatorClient, groupID string, rank int, setup error, silent func() error) error {
	if setup != nil {
		return rt.ready(client, groupID, rank, setup)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.readyCtx(ctx, client, groupID, rank, nil) }()
	tick := time.NewTicker(foundersProbe)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			cancel()
			return err
		case <-tick.C:
			gone := silent()
			if gone == nil {
				continue
			}
			cancel()
			if err := <-done; !errors.Is(err, errWithdrawn) {
				return err // the round ended first: its outcome stands
			}
			// The coordinator forgets the withdrawn report when it sees the
			// call cancelled; a report that comes first is answered as a
			// second one, to this rank alone: report again.
			for try := 0; ; try++ {
				err := rt.ready(client, groupID, rank, gone)
				if try == 20 || err == nil || !strings.Contains(err.Error(), "reported its set-up twice") {
					return err
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

// silentFounder probes the other founders' engines and returns an error
// naming the first that does not answer (nil: all do).
func (g *Group) silentFounder() error {
	for r := range g.size {
		if p := g.peer(r); p != nil && r != g.rank {
			if err := g.engine.Probe(p.name); err != nil {
				return fmt.Errorf("rank %d (%s) does not answer: %v", r, p.name, err)
			}
		}
	}
	return nil
}
