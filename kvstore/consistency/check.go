package consistency

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// KeyResult is the verdict on one key's history.
type KeyResult struct {
	Key string
	// Ops is how many operations on the key were checked.
	Ops int
	// Result is porcupine's: Ok, Illegal (not linearizable) or Unknown
	// (the check ran out of time).
	Result porcupine.CheckResult
	// Torn lists the reads of the key whose bytes were no write's (each
	// an anomaly; Result is the verdict on the rest).
	Torn []porcupine.Operation
	// TornContext shows, for each torn read, the operations on the key
	// that overlapped it.
	TornContext []string
	// Explanation shows where the history fails: the longest order of
	// operations the model accepts, then the operations none of those
	// orders could place next (Illegal only).
	Explanation string
	// Visualization is the path of porcupine's HTML view of the key's
	// history (Illegal only).
	Visualization string
}

// Report is the verdict on a whole history.
type Report struct {
	Ops  int // per-key operations checked
	Keys []KeyResult
}

// Anomalies counts the torn reads (each an anomaly by itself) and the
// keys whose history is not linearizable.
func (r Report) Anomalies() int {
	n := 0
	for _, k := range r.Keys {
		n += len(k.Torn)
		if k.Result == porcupine.Illegal {
			n++
		}
	}
	return n
}

// Unknown counts the keys whose check ran out of time.
func (r Report) Unknown() int {
	n := 0
	for _, k := range r.Keys {
		if k.Result == porcupine.Unknown {
			n++
		}
	}
	return n
}

// String describes every failing key: its verdict, its torn reads, the
// explanation and the visualization's path.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d operations on %d keys, %d anomalies, %d keys unchecked (timeout)\n", r.Ops, len(r.Keys), r.Anomalies(), r.Unknown())
	for _, k := range r.Keys {
		if k.Result == porcupine.Ok && len(k.Torn) == 0 {
			continue
		}
		fmt.Fprintf(&b, "key %q: %s over %d operations, %d torn reads\n", k.Key, k.Result, k.Ops, len(k.Torn))
		for _, c := range k.TornContext {
			b.WriteString(c)
		}
		if k.Explanation != "" {
			b.WriteString(k.Explanation)
		}
		if k.Visualization != "" {
			fmt.Fprintf(&b, "  visualization: %s\n", k.Visualization)
		}
	}
	return b.String()
}

// Check checks a history key by key, each key for at most timeout (0: no
// limit). A key that is not linearizable gets an explanation and an HTML
// visualization written to a temporary file.
func Check(records []Record, timeout time.Duration) (Report, error) {
	ops, err := Operations(records)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Ops: len(ops)}
	for _, part := range partitionByKey(ops) {
		k := KeyResult{Key: part[0].Input.(Input).Key, Ops: len(part)}
		for _, op := range part {
			if op.Output.(Output).Torn != "" {
				k.Torn = append(k.Torn, op)
			}
		}
		for _, op := range k.Torn {
			k.TornContext = append(k.TornContext, tornContext(part, op))
		}
		// First without the failed writes nobody read: if the rest has a
		// linearization, so has the whole (they go at its end, where
		// any failed write may take effect). Only when it has none is
		// the whole searched, open writes and all.
		var info, leanInfo porcupine.LinearizationInfo
		k.Result = porcupine.Illegal
		leanResult := porcupine.Unknown
		lean := withoutUnreadFailedWrites(part)
		if len(lean) < len(part) {
			leanResult, leanInfo = porcupine.CheckOperationsVerbose(Model, lean, timeout)
			k.Result, info = leanResult, leanInfo
		}
		if k.Result != porcupine.Ok {
			k.Result, info = porcupine.CheckOperationsVerbose(Model, part, timeout)
		}
		switch {
		case k.Result == porcupine.Illegal:
			k.Explanation = explain(part, info)
		case k.Result == porcupine.Unknown && leanResult == porcupine.Illegal:
			k.Explanation = "  the search of the whole history ran out of time; without the failed writes nobody read it fails here:\n" +
				explain(lean, leanInfo)
		}
		if k.Result == porcupine.Illegal || (k.Result == porcupine.Ok && len(k.Torn) > 0) {
			f, err := os.CreateTemp("", "mooncake-consistency-*.html")
			if err != nil {
				return rep, err
			}
			f.Close()
			if err := porcupine.VisualizePath(Model, info, f.Name()); err != nil {
				return rep, fmt.Errorf("visualize key %q: %w", k.Key, err)
			}
			k.Visualization = f.Name()
		}
		rep.Keys = append(rep.Keys, k)
	}
	sort.Slice(rep.Keys, func(i, j int) bool { return rep.Keys[i].Key < rep.Keys[j].Key })
	return rep, nil
}

// withoutUnreadFailedWrites is part less the puts and upserts that failed
// (or never returned) and whose value no read returned. Such a write can
// always be linearized last, so part is linearizable if this is; they are
// what makes the search long (each may take effect at any point after its
// call).
func withoutUnreadFailedWrites(part []porcupine.Operation) []porcupine.Operation {
	read := map[ValueID]bool{}
	for _, op := range part {
		if in, out := op.Input.(Input), op.Output.(Output); in.Kind == Get && !out.Unknown {
			read[out.Read] = true
		}
	}
	var out []porcupine.Operation
	for _, op := range part {
		in := op.Input.(Input)
		if (in.Kind == Put || in.Kind == Upsert) && op.Output.(Output).Unknown && !read[in.Value] {
			continue
		}
		out = append(out, op)
	}
	return out
}

// tornContext describes a torn read and the operations on its key that
// overlapped it or returned shortly (tornWindow) before it was called,
// leaving out those called long (tornWindow) before it and still open
// (writes that failed long ago).
func tornContext(part []porcupine.Operation, torn porcupine.Operation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  torn read: %s  [%s %s]\n", Model.DescribeOperation(torn.Input, torn.Output), torn.Metadata, span(torn))
	b.WriteString("    beside it:\n")
	for _, op := range part {
		if op.Metadata != torn.Metadata && op.Call <= torn.Return && op.Return >= torn.Call-tornWindow &&
			(op.Return != math.MaxInt64 || op.Call >= torn.Call-tornWindow) {
			fmt.Fprintf(&b, "      %s  [%s %s]\n", Model.DescribeOperation(op.Input, op.Output), op.Metadata, span(op))
		}
	}
	return b.String()
}

// tornWindow is how long before a torn read the operations that returned,
// or were called without returning, are still shown beside it.
const tornWindow = int64(10 * time.Millisecond)

// explainTail is how many linearized operations the explanation shows
// before the point where the history fails.
const explainTail = 12

// explain prints the end of the longest partial linearization porcupine
// found for one key, and the operations that could not follow it: those
// that were called before the earliest return among the rest (the next
// operation must be one of them).
func explain(part []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []porcupine.Operation
	for _, p := range info.PartialLinearizationsOperations() {
		for _, lin := range p {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	var b strings.Builder
	state := Model.Init()
	fmt.Fprintf(&b, "  longest linearizable prefix: %d of %d operations; its end:\n", len(longest), len(part))
	for i, op := range longest {
		_, state = Model.Step(state, op.Input, op.Output)
		if i >= len(longest)-explainTail {
			fmt.Fprintf(&b, "    %s  [%s %s] -> state %s\n", Model.DescribeOperation(op.Input, op.Output), op.Metadata, span(op), Model.DescribeState(state))
		}
	}
	done := map[string]bool{}
	for _, op := range longest {
		done[op.Metadata.(string)] = true
	}
	var rest []porcupine.Operation
	firstReturn := int64(math.MaxInt64)
	for _, op := range part {
		if !done[op.Metadata.(string)] {
			rest = append(rest, op)
			firstReturn = min(firstReturn, op.Return)
		}
	}
	fmt.Fprintf(&b, "  none of these can come next from state %s:\n", Model.DescribeState(state))
	for _, op := range rest {
		if op.Call <= firstReturn {
			fmt.Fprintf(&b, "    %s  [%s %s]\n", Model.DescribeOperation(op.Input, op.Output), op.Metadata, span(op))
		}
	}
	return b.String()
}

// span shows an operation's call and return times in ms.
func span(op porcupine.Operation) string {
	if op.Return == math.MaxInt64 {
		return fmt.Sprintf("%.3f ms .. open", float64(op.Call)/1e6)
	}
	return fmt.Sprintf("%.3f .. %.3f ms", float64(op.Call)/1e6, float64(op.Return)/1e6)
}
