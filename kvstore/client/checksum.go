package client

import "hash/crc64"

// crcTable is CRC-64/ECMA, used for object checksums when
// MOONCAKE_STORE_CHECKSUM=1.
var crcTable = crc64.MakeTable(crc64.ECMA)

// checksum is the CRC-64 of the object held by parts, in order.
func checksum(parts []Part) uint64 {
	var sum uint64
	for _, p := range parts {
		sum = crc64.Update(sum, crcTable, mem(p.Addr, p.Size))
	}
	return sum
}
