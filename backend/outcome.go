package backend

import "slices"

// outcome is the result of a failure reconciliation that a rank took part
// in before reaching the failed collective (from its idle queue), kept
// for that collective: the ranks excluded from it and whether this rank
// itself was left out. The ranks that were in the collective when it
// failed mark the same on their Work when they reconcile (recover), so
// every survivor completes the op with the same failed ranks and local
// success (docs/collectives.md, "One outcome per collective"). Owned by
// the collective FIFO.
type outcome struct {
	base, op uint64 // the collective it belongs to; op 0: none pending
	failed   []int
	lost     bool
}

// set records the outcome for collective op of base, merged with one
// still pending (two reconciliations before the rank's next collective).
func (o *outcome) set(base, op uint64, failed []int, lost bool) {
	if len(failed) == 0 && !lost {
		return
	}
	if o.op != 0 {
		failed = append(slices.Clone(o.failed), failed...)
		lost = lost || o.lost
	}
	slices.Sort(failed)
	*o = outcome{base: base, op: op, failed: slices.Compact(failed), lost: lost}
}

// apply marks w, the collective op of base that is starting, with the
// pending outcome when it belongs to that collective. An outcome whose
// collective has passed (a newer base) is dropped.
func (o *outcome) apply(base, op uint64, w *Work) {
	if o.op == 0 || base < o.base || base == o.base && op < o.op {
		return
	}
	if base == o.base && op == o.op {
		w.markFailed(o.failed)
		if o.lost {
			w.markLost()
		}
	}
	*o = outcome{}
}
