package consistency

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/anishathalye/porcupine"
)

// OpKind is what an operation does.
type OpKind string

// The operations a worker runs. Batch forms are one Record over several
// keys; the history checks them as one operation per key.
const (
	Put      OpKind = "put"
	Upsert   OpKind = "upsert"
	Get      OpKind = "get"
	Remove   OpKind = "remove"
	Exist    OpKind = "exist"
	BatchPut OpKind = "batch_put"
	BatchGet OpKind = "batch_get"
)

// single is the per-key operation a batch is made of.
func (k OpKind) single() OpKind {
	switch k {
	case BatchPut:
		return Put
	case BatchGet:
		return Get
	}
	return k
}

// Record is one event of a history, one JSON line of a worker's output.
// A call names the operation and what it writes; its return (same Worker
// and Op) carries one result per key. A call without a return is an
// operation whose outcome is unknown.
type Record struct {
	// Type is "call" or "ret".
	Type   string `json:"t"`
	Worker int    `json:"w"`
	// Op numbers the worker's operations.
	Op uint64 `json:"op"`
	// Time is a CLOCK_MONOTONIC reading (Now), in ns.
	Time int64 `json:"ts"`
	// Kind, Keys and Values (the writes of put and upsert, one per key)
	// are set on calls.
	Kind   OpKind    `json:"kind,omitempty"`
	Keys   []string  `json:"keys,omitempty"`
	Values []ValueID `json:"vals,omitempty"`
	// Results are set on returns, one per key.
	Results []Result `json:"res,omitempty"`
}

// Result is one key's outcome of an operation.
type Result struct {
	// Code is the ErrorCode (0: OK); for exist, 1 or 0 when it answered.
	Code int `json:"c"`
	// Read is the write a get returned (Code 0).
	Read ValueID `json:"r,omitzero"`
	// Torn says why the bytes a get returned are no write of the key.
	Torn string `json:"torn,omitempty"`
	// Size is the size of what a get returned.
	Size int `json:"n,omitempty"`
}

// Error codes the model tells apart (kvstore.ErrorCode values; the
// package does not import kvstore so that the checker stands alone).
const (
	codeOK                 = 0
	codeObjectNotFound     = -704
	codeObjectAlreadyThere = -705
	codeObjectHasLease     = -706
	codeReplicaNotReady    = -703
)

// Now is the CLOCK_MONOTONIC time in ns: one clock for all processes of
// the host, so events of several workers are ordered.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// ReadRecords parses JSON lines of Records from r.
func ReadRecords(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // not an event (a log line)
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, fmt.Errorf("history line %q: %w", line, err)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// Input is a per-key operation as the model sees it.
type Input struct {
	Kind OpKind
	Key  string
	// Value is what a put or upsert writes.
	Value ValueID
}

// Output is a per-key outcome as the model sees it.
type Output struct {
	// Unknown: the operation failed or never returned. A write may or
	// may not have taken effect; a read tells nothing.
	Unknown bool
	Code    int
	Read    ValueID
	Torn    string
}

// Operations pairs calls with returns and splits every operation into
// one porcupine operation per key. An operation without a return, or
// with an outcome that leaves its effect unknown (a failed write), gets
// the return time math.MaxInt64: it may take effect at any point after
// its call. The porcupine client id is the worker's number less one.
func Operations(records []Record) ([]porcupine.Operation, error) {
	type key struct {
		w  int
		op uint64
	}
	calls := map[key]Record{}
	rets := map[key]Record{}
	for _, r := range records {
		k := key{r.Worker, r.Op}
		switch r.Type {
		case "call":
			if _, dup := calls[k]; dup {
				return nil, fmt.Errorf("worker %d op %d called twice", r.Worker, r.Op)
			}
			calls[k] = r
		case "ret":
			rets[k] = r
		default:
			return nil, fmt.Errorf("record type %q", r.Type)
		}
	}
	var ops []porcupine.Operation
	for k, c := range calls {
		ret, returned := rets[k]
		if returned && len(ret.Results) != len(c.Keys) {
			return nil, fmt.Errorf("worker %d op %d: %d results for %d keys", k.w, k.op, len(ret.Results), len(c.Keys))
		}
		if (c.Kind == Put || c.Kind == Upsert || c.Kind == BatchPut) && len(c.Values) != len(c.Keys) {
			return nil, fmt.Errorf("worker %d op %d: %d values for %d keys", k.w, k.op, len(c.Values), len(c.Keys))
		}
		for i, key := range c.Keys {
			in := Input{Kind: c.Kind.single(), Key: key}
			if i < len(c.Values) {
				in.Value = c.Values[i]
			}
			out := Output{Unknown: true}
			end := int64(math.MaxInt64)
			if returned {
				res := ret.Results[i]
				out = Output{Code: res.Code, Read: res.Read, Torn: res.Torn}
				out.Unknown = uncertain(in.Kind, res)
				if !out.Unknown || !in.Kind.writes() {
					end = ret.Time
				}
			}
			ops = append(ops, porcupine.Operation{ClientId: max(k.w-1, 0), Input: in, Call: c.Time, Output: out, Return: end,
				Metadata: fmt.Sprintf("w%d op%d", k.w, k.op)})
		}
	}
	for k := range rets {
		if _, ok := calls[k]; !ok {
			return nil, fmt.Errorf("worker %d op %d returned without a call", k.w, k.op)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops, nil
}

// writes reports whether k changes the store.
func (k OpKind) writes() bool { return k == Put || k == Upsert || k == Remove }

// uncertain reports whether res leaves the outcome of a k unknown: a
// write whose error does not prove it changed nothing, a read that
// returned neither a value nor "not found". A torn read is certain: it is
// an anomaly.
func uncertain(k OpKind, res Result) bool {
	switch k {
	case Put:
		return res.Code != codeOK && res.Code != codeObjectAlreadyThere
	case Upsert:
		return res.Code != codeOK
	case Remove:
		switch res.Code {
		case codeOK, codeObjectNotFound, codeObjectHasLease, codeReplicaNotReady:
			return false // the master answered: done, or refused
		}
		return true
	case Get:
		return res.Torn == "" && res.Code != codeOK && res.Code != codeObjectNotFound
	case Exist:
		return res.Code != 0 && res.Code != 1
	}
	return true
}
