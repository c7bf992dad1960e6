package main

import (
	"fmt"
	"strconv"
	"strings"
)

// sizeFlag is a byte count given as a number or with a unit: 4GB, 4GiB,
// 512MB, 64K (decimal and binary prefixes both mean powers of 1024, as
// upstream's size strings do).
type sizeFlag struct{ n *uint64 }

// String implements flag.Value.
func (s sizeFlag) String() string {
	if s.n == nil {
		return "0"
	}
	return strconv.FormatUint(*s.n, 10)
}

// Set implements flag.Value.
func (s sizeFlag) Set(v string) error {
	t := strings.ToUpper(strings.TrimSpace(v))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	shift := 0
	if t != "" {
		if i := strings.IndexByte("KMGT", t[len(t)-1]); i >= 0 {
			shift = 10 * (i + 1)
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseUint(strings.TrimSpace(t), 10, 64)
	if err != nil || shift > 0 && n > (1<<(64-shift))-1 {
		return fmt.Errorf("invalid size %q (a number of bytes, or with K, M, G, T: 4GB, 512MiB)", v)
	}
	*s.n = n << shift
	return nil
}
