package backend

import "slices"

// outcome is the result of a failure reconciliation that a rank took part
// in before reaching the failed collective (from its idle queue, or one
// collective behind the others), kept for that collective: the ranks
// excluded from it, whether this rank itself was left out, and whether the
// others run it again (skip false: this rank runs it with them, as the
// first collective of the new base) or completed it without (skip true:
// it completes at once, without running, its buffers untouched). The ranks that were in the collective when it
// failed mark the same on their Work when they reconcile (recover), so
// every survivor completes the op with the same failed ranks and local
// success (docs/collectives-faults.md, "One outcome per collective"). Owned by
// the collective FIFO.
type outcome struct {
	base, op uint64 // the collective it belongs to; op 0: none pending
	failed   []int
	lost     bool
	skip     bool
}

// set records the outcome for collective op of base, merged with one
// still pending (two reconciliations before the rank's next collective).
func (o *outcome) set(base, op uint64, failed []int, lost, skip bool) {
	if len(failed) == 0 && !lost && !skip {
		return
	}
	if o.op != 0 {
		failed = append(slices.Clone(o.failed), failed...)
		lost = lost || o.lost
	}
	slices.Sort(failed)
	*o = outcome{base: base, op: op, failed: slices.Compact(failed), lost: lost, skip: skip}
}

// apply marks w, the collective op of base that is starting, with the
// pending outcome when it belongs to that collective, and reports whether
// the collective is to be skipped (completed at once, without running).
// An outcome whose collective has passed (a newer base) is dropped.
func (o *outcome) apply(base, op uint64, w *Work) (skip bool) {
	if o.op == 0 || base < o.base || base == o.base && op < o.op {
		return false
	}
	if base == o.base && op == o.op {
		w.markFailed(o.failed)
		if o.lost {
			w.markLost()
		}
		skip = o.skip
	}
	*o = outcome{}
	return skip
}
