"""Huge page sizes and the kernel's reserved pools, for the store's memory
and `MooncakeHostMemAllocator`."""

from __future__ import annotations

# The sizes Mooncake allocates on, by upstream's names, as log2(bytes): the
# shift memfd_create's MFD_HUGE_* and mmap's MAP_HUGE_* flags carry.
PAGE_SHIFTS = {"2MB": 21, "1GB": 30}


def page_shift(name: str) -> int:
    """log2 of the huge page size `name` ("2MB" or "1GB"); ValueError otherwise."""
    try:
        return PAGE_SHIFTS[name]
    except (KeyError, TypeError):
        want = sorted(PAGE_SHIFTS)
        raise ValueError(f"hugepage_size must be one of {want}, not {name!r}") from None


def free_pages(page_bytes: int) -> int:
    """Free huge pages of that size the kernel has reserved (0 if none)."""
    path = f"/sys/kernel/mm/hugepages/hugepages-{page_bytes >> 10}kB/free_hugepages"
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0
