package standalone

import (
	"testing"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// FuzzDecodeRequest decodes fuzzed request bodies as the daemon does and
// runs what a decoded request reaches without a store behind it: the
// translation of its memory into the daemon's mapping of the dummy's
// regions. Nothing panics, and every translated part lies inside a region.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"op":"hello","scope":"s","keyspace":"default"}`,
		`{"op":"register","base":65536,"size":4096,"offset":0}`,
		`{"op":"register","base":18446744073709547520,"size":8192}`,
		`{"op":"put","keys":["a","b"],"parts":[[{"a":65536,"s":16}],[{"a":69632,"s":4096}]],"upsert":true}`,
		`{"op":"get","keys":["a"],"parts":[[{"a":65535,"s":2}]],"fit":true}`,
		`{"op":"get","keys":["a","b"],"parts":[[]]}`,
		`{"op":"ranges","ranges":[{"k":"a","d":65536,"o":5,"s":10},{"k":"b","d":0,"s":0}]}`,
		`{"op":"size","keys":[]}`,
		`{"op":"remove_all","force":true}`,
		`{"op":"put","keys":["x"],"parts":[[{"a":69628,"s":8}]]}`,
		`{"op":"put","keys":["a"],"parts":[[{"a":65536,"s":18446744073709551615}]],"config":{"replica_num":2}}`,
		`{"op":7}`, `[]`, `{"op":"nope"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > ipc.MaxBody {
			return
		}
		req, err := decodeRequest(body)
		if err != nil {
			return
		}
		// Two regions adjacent in the dummy's space, apart in the daemon's.
		mem := make([]byte, 3*4096)
		s := &session{regions: []*installed{
			{base: 0x10000, size: 4096, m: &ipc.Region{FD: -1, Mem: mem[:4096]}},
			{base: 0x11000, size: 4096, m: &ipc.Region{FD: -1, Mem: mem[2*4096:]}},
		}}
		inside := func(addr uintptr, size uint64) bool {
			for _, r := range s.regions {
				lo, hi := gpu.AddrOf(r.m.Mem), gpu.AddrOf(r.m.Mem)+uintptr(len(r.m.Mem))
				if addr >= lo && addr < hi && size <= uint64(hi-addr) {
					return true
				}
			}
			return size == 0
		}
		switch req.Op {
		case opPut, opGet:
			out := make([]int64, len(req.Keys))
			keys, parts, idx := s.translateKeys(req, out)
			if len(keys) != len(parts) || len(keys) != len(idx) {
				t.Fatalf("%d keys, %d part lists, %d positions", len(keys), len(parts), len(idx))
			}
			for _, ps := range parts {
				for _, p := range ps {
					if !inside(p.Addr, p.Size) {
						t.Fatalf("part [%#x,+%d) outside every region", p.Addr, p.Size)
					}
				}
			}
		case opRanges:
			for _, r := range req.Ranges {
				if p, ok := s.translate([]span{{Addr: r.Dst, Size: r.Size}}); ok && !inside(p[0].Addr, p[0].Size) {
					t.Fatalf("range [%#x,+%d) outside the regions", p[0].Addr, p[0].Size)
				}
			}
		case opSize:
			_ = req.Keys[0]
		case opRegister:
			if req.Size == 0 || req.Base+req.Size < req.Base || req.Offset+req.Size < req.Offset {
				t.Fatalf("register range [%#x,+%d) at %d accepted", req.Base, req.Size, req.Offset)
			}
		}
	})
}
