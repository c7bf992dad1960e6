package channel

import (
	"github.com/mooncake-go/mooncake/transfer"

	"github.com/mooncake-go/mooncake/gpu"
)

// Get copies len(dst) bytes at offset off of from's region into dst:
// through a direct view when there is one, else with a READ into stage
// (this side's registered memory, at least len(dst) bytes) and a copy.
func Get(eng *transfer.Engine, from Endpoint, off uint64, dst, stage []byte) error {
	return GetWithin(eng, from, off, dst, stage, Patience{})
}

// GetWithin is Get with its transfer bounded by p (Patience).
func GetWithin(eng *transfer.Engine, from Endpoint, off uint64, dst, stage []byte, p Patience) error {
	if len(dst) == 0 {
		return nil
	}
	ok, err := eng.AccessRemote(from.Seg, from.Base+off, uint64(len(dst)), func(view []byte) { copy(dst, view) })
	if err != nil || ok {
		return err
	}
	req := transfer.Request{Opcode: transfer.OpRead, Source: gpu.AddrOf(stage), Target: from.Seg,
		TargetOffset: from.Base + off, Length: uint64(len(dst))}
	if err := RunWithin(eng, []transfer.Request{req}, p)[0]; err != nil {
		return err
	}
	copy(dst, stage[:len(dst)])
	return nil
}
