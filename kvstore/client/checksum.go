package client

import (
	"hash/crc64"

	"github.com/mooncake-go/mooncake/gpu"
)

// crcTable is CRC-64/ECMA, used for object checksums when
// MOONCAKE_STORE_CHECKSUM=1.
var crcTable = crc64.MakeTable(crc64.ECMA)

// checksumChunk bounds the host copy of device memory being summed.
const checksumChunk = 1 << 20

// checksum is the CRC-64 of the object held by parts, in order. Host parts
// are read in place; device parts through a host copy, a chunk at a time.
func checksum(gm *gpu.Memory, parts []Part) (uint64, error) {
	var sum uint64
	var buf []byte
	for _, p := range parts {
		info, err := gm.Range(p.Addr, p.Size)
		if err != nil {
			return 0, err
		}
		if info.HostAccessible() {
			sum = crc64.Update(sum, crcTable, mem(p.Addr, p.Size))
			continue
		}
		if buf == nil {
			buf = make([]byte, checksumChunk)
		}
		for off := uint64(0); off < p.Size; {
			b := buf[:min(uint64(len(buf)), p.Size-off)]
			if err := gm.CopyToHost(b, p.Addr+uintptr(off)); err != nil {
				return 0, err
			}
			sum = crc64.Update(sum, crcTable, b)
			off += uint64(len(b))
		}
	}
	return sum, nil
}
