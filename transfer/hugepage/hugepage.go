// Package hugepage holds what the Transfer Engine and the store client need
// to put memory on huge pages: the supported sizes, the flag bits and
// rounding, and an error that tells the user how to reserve pages.
package hugepage

import (
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/transfer/errcode"
)

// Huge page sizes the engine can allocate managed buffers on.
const (
	Size2MB = 2 << 20
	Size1GB = 1 << 30
)

// sysfs is where the kernel lists its huge page pools; a variable for
// tests.
var sysfs = "/sys/kernel/mm/hugepages"

// Valid reports whether pageSize is one the engine supports (0, meaning
// normal pages, is not a huge page size).
func Valid(pageSize uint64) bool {
	return pageSize == Size2MB || pageSize == Size1GB
}

// Shift is log2(pageSize), the value memfd_create's MFD_HUGE_* and mmap's
// MAP_HUGE_* flags carry in their high bits.
func Shift(pageSize uint64) int { return bits.TrailingZeros64(pageSize) }

// RoundUp rounds length up to a whole number of pageSize pages.
func RoundUp(length, pageSize uint64) uint64 {
	return (length + pageSize - 1) / pageSize * pageSize
}

// Free is how many pages of pageSize the kernel has free in its reserved
// pool (0 when it reserved none).
func Free(pageSize uint64) int {
	b, err := os.ReadFile(fmt.Sprintf("%s/hugepages-%dkB/free_hugepages", sysfs, pageSize>>10))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// Shortage is the error for length bytes that could not be mapped on huge
// pages of pageSize: it says how many pages were needed and free, and how
// to reserve them.
func Shortage(pageSize, length uint64, cause error) error {
	need := RoundUp(length, pageSize) / pageSize
	return errcode.Errorf(errcode.Memory, cause,
		"%d huge pages of %d KiB needed for %d bytes, %d free; reserve them with "+
			"`sysctl vm.nr_hugepages=N` (2 MiB pages) or %s/hugepages-%dkB/nr_hugepages",
		need, pageSize>>10, length, Free(pageSize), sysfs, pageSize>>10)
}
