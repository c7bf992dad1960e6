package transfer

import (
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
)

// Huge page sizes the engine can allocate managed buffers on.
const (
	HugePage2MB = 2 << 20
	HugePage1GB = 1 << 30
)

// hugePageSysfs is where the kernel lists its huge page pools; a variable
// for tests.
var hugePageSysfs = "/sys/kernel/mm/hugepages"

// ValidHugePageSize reports whether pageSize is one the engine supports
// (0, meaning normal pages, is not a huge page size).
func ValidHugePageSize(pageSize uint64) bool {
	return pageSize == HugePage2MB || pageSize == HugePage1GB
}

// HugePageShift is log2(pageSize), the value memfd_create's MFD_HUGE_*
// and mmap's MAP_HUGE_* flags carry in their high bits.
func HugePageShift(pageSize uint64) int { return bits.TrailingZeros64(pageSize) }

// RoundToPages rounds length up to a whole number of pageSize pages.
func RoundToPages(length, pageSize uint64) uint64 {
	return (length + pageSize - 1) / pageSize * pageSize
}

// FreeHugePages is how many pages of pageSize the kernel has free in its
// reserved pool (0 when it reserved none).
func FreeHugePages(pageSize uint64) int {
	b, err := os.ReadFile(fmt.Sprintf("%s/hugepages-%dkB/free_hugepages", hugePageSysfs, pageSize>>10))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// HugePageShortage is the error for length bytes that could not be mapped
// on huge pages of pageSize: it says how many pages were needed and free,
// and how to reserve them.
func HugePageShortage(pageSize, length uint64, cause error) error {
	need := RoundToPages(length, pageSize) / pageSize
	return errorf(CodeMemory, cause,
		"%d huge pages of %d KiB needed for %d bytes, %d free; reserve them with "+
			"`sysctl vm.nr_hugepages=N` (2 MiB pages) or %s/hugepages-%dkB/nr_hugepages",
		need, pageSize>>10, length, FreeHugePages(pageSize), hugePageSysfs, pageSize>>10)
}
