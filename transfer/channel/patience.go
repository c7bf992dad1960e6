package channel

import (
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/transfer"
)

// Patience bounds the transfers of a put or get the way a caller bounds
// its waits for a peer (the collectives: their timeout, then a probe). A
// run of a transfer lasts at most Timeout; one that timed out runs again,
// alone, while Alive (asked about the request's target) answers nil, so a
// peer that stopped answering fails its transfers after Timeout plus
// Alive's own time, not after the engine's transfer timeout, while a slow
// but live one still has the engine's whole transfer timeout (or Timeout,
// if longer) in all. The zero Patience is the engine's transfer timeout
// alone.
type Patience struct {
	Timeout time.Duration
	Alive   func(transfer.SegmentHandle) error
}

// patient reports whether p bounds runs itself.
func (p Patience) patient() bool { return p.Timeout > 0 && p.Alive != nil }

// run runs reqs as one batch, bounded by p.
func (p Patience) run(eng *transfer.Engine, reqs []transfer.Request) ([]transfer.Status, error) {
	if !p.patient() {
		return eng.RunBatch(reqs)
	}
	return eng.RunBatchWithin(reqs, p.Timeout)
}

// outlast follows req, whose first run (begun at start) timed out: it runs
// req again while its target answers Alive and the time in all allows. A
// target that does not answer is put in gone with its error, so that the
// batch's other requests to it fail without asking again.
func (p Patience) outlast(eng *transfer.Engine, req transfer.Request, start time.Time, gone *map[transfer.SegmentHandle]error) error {
	if !p.patient() {
		return fmt.Errorf("transfer %v", transfer.StatusTimeout)
	}
	end := start.Add(max(eng.Timeout(), p.Timeout))
	for {
		left := time.Until(end)
		if left <= 0 {
			return fmt.Errorf("transfer %v (%v in all)", transfer.StatusTimeout, max(eng.Timeout(), p.Timeout))
		}
		if err := p.Alive(req.Target); err != nil {
			err = fmt.Errorf("transfer %v after %v, and the peer does not answer: %w", transfer.StatusTimeout, p.Timeout, err)
			if *gone == nil {
				*gone = map[transfer.SegmentHandle]error{}
			}
			(*gone)[req.Target] = err
			return err
		}
		again, err := eng.RunBatchWithin([]transfer.Request{req}, min(p.Timeout, left))
		switch {
		case err != nil:
			return err
		case again[0] == transfer.StatusCompleted:
			return nil
		case again[0] != transfer.StatusTimeout:
			return fmt.Errorf("transfer %v (after %v)", again[0], transfer.StatusTimeout)
		}
	}
}
