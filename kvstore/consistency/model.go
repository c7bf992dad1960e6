package consistency

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Model is the store's promise for one key, a porcupine model whose state
// is the key's current value (the zero ValueID: absent). Partition splits
// a history by key, so each key is checked on its own.
var Model = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() any { return ValueID{} },
	Step: func(state, input, output any) (bool, any) {
		return step(state.(ValueID), input.(Input), output.(Output))
	},
	DescribeOperation: func(input, output any) string {
		return describe(input.(Input), output.(Output))
	},
	DescribeState: func(state any) string { return state.(ValueID).String() },
	DescribeOperationMetadata: func(m any) string {
		if m == nil {
			return ""
		}
		return m.(string)
	},
}

// step applies one operation to the key's value cur: whether the store
// may answer in with out when the value is cur, and the value after.
//
// A torn read is an anomaly whatever the state (Check counts each one);
// the model takes it as a read that tells nothing, so that the search goes
// on over the rest of the history rather than trying every order of the
// operations before the torn read only to reject them all.
func step(cur ValueID, in Input, out Output) (bool, ValueID) {
	if out.Torn != "" {
		return true, cur
	}
	switch in.Kind {
	case Put:
		if out.Code == codeObjectAlreadyThere && !out.Unknown {
			return !cur.IsZero(), cur
		}
		// OK, or unknown and taking effect here: a put of an absent key
		// stores its value, of an existing key changes nothing.
		if cur.IsZero() {
			return true, in.Value
		}
		return true, cur
	case Upsert:
		return true, in.Value
	case Remove:
		if out.Unknown {
			return true, ValueID{}
		}
		switch out.Code {
		case codeObjectNotFound:
			return cur.IsZero(), cur
		case codeOK:
			return !cur.IsZero(), ValueID{}
		}
		// OBJECT_HAS_LEASE, REPLICA_IS_NOT_READY: refused, nothing changed.
		return true, cur
	case Get:
		switch {
		case out.Unknown:
			return true, cur
		case out.Code == codeObjectNotFound:
			return cur.IsZero(), cur
		default:
			return out.Read == cur, cur
		}
	case Exist:
		switch {
		case out.Unknown:
			return true, cur
		case out.Code == 1:
			return !cur.IsZero(), cur
		default:
			// 0 is "absent, or a write of the key is open": an
			// upsert hides the value it replaces until it ends.
			return true, cur
		}
	}
	return false, cur
}

// partitionByKey groups operations by their key.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		k := op.Input.(Input).Key
		i, ok := index[k]
		if !ok {
			i = len(parts)
			index[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

func describe(in Input, out Output) string {
	var res string
	switch {
	case out.Torn != "":
		res = "TORN: " + out.Torn
	case out.Unknown:
		res = fmt.Sprintf("unknown (%d)", out.Code)
	case in.Kind == Get && out.Code == codeOK:
		res = out.Read.String()
	case in.Kind == Exist:
		res = fmt.Sprintf("%d", out.Code)
	case out.Code == codeOK:
		res = "ok"
	default:
		res = fmt.Sprintf("%d", out.Code)
	}
	if in.Kind == Put || in.Kind == Upsert {
		return fmt.Sprintf("%s(%s, %v) -> %s", in.Kind, in.Key, in.Value, res)
	}
	return fmt.Sprintf("%s(%s) -> %s", in.Kind, in.Key, res)
}
