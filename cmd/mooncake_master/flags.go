package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// msDuration is a flag holding a duration given in milliseconds ("500"),
// or as a Go duration string ("10s", "1m", "500ms"), as upstream's
// --default_kv_lease_ttl accepts.
type msDuration struct{ d *time.Duration }

// String implements flag.Value.
func (m msDuration) String() string {
	if m.d == nil {
		return ""
	}
	return strconv.FormatInt(m.d.Milliseconds(), 10)
}

// Set implements flag.Value.
func (m msDuration) Set(s string) error {
	d, err := parseDuration(s, time.Millisecond)
	if err != nil {
		return err
	}
	*m.d = d
	return nil
}

// secDuration is a flag holding a duration given in seconds ("10") or as a
// Go duration string.
type secDuration struct{ d *time.Duration }

// String implements flag.Value.
func (m secDuration) String() string {
	if m.d == nil {
		return ""
	}
	return strconv.FormatFloat(m.d.Seconds(), 'f', -1, 64)
}

// Set implements flag.Value.
func (m secDuration) Set(s string) error {
	d, err := parseDuration(s, time.Second)
	if err != nil {
		return err
	}
	*m.d = d
	return nil
}

// parseDuration reads a plain non-negative number in unit, or a Go
// duration string.
func parseDuration(s string, unit time.Duration) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("negative duration %q", s)
		}
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (a number of %s or e.g. 10s, 1m)", s, unitName(unit))
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}

func unitName(u time.Duration) string {
	if u == time.Millisecond {
		return "milliseconds"
	}
	return "seconds"
}

// ratio is a float flag validated in [0,1].
type ratio struct{ f *float64 }

// String implements flag.Value.
func (r ratio) String() string {
	if r.f == nil {
		return ""
	}
	return strconv.FormatFloat(*r.f, 'f', -1, 64)
}

// Set implements flag.Value.
func (r ratio) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return fmt.Errorf("invalid ratio %q", s)
	}
	if f < 0 || f > 1 {
		return fmt.Errorf("ratio %v not in [0,1]", f)
	}
	*r.f = f
	return nil
}

// port is an int flag validated in [0,65535].
type port struct{ p *int }

// String implements flag.Value.
func (p port) String() string {
	if p.p == nil {
		return ""
	}
	return strconv.Itoa(*p.p)
}

// Set implements flag.Value.
func (p port) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("invalid port %q", s)
	}
	*p.p = n
	return nil
}

var (
	_ flag.Value = msDuration{}
	_ flag.Value = secDuration{}
	_ flag.Value = ratio{}
	_ flag.Value = port{}
)
