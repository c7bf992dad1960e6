// Package envvars is the one table of the environment variables that
// Mooncake-Go reads (MC_*, MOONCAKE_*), with how each value is parsed and
// which values are in range, plus upstream Mooncake's variables that this
// implementation does not read. The Go runtime reads its variables through
// the accessors here and `mooncake doctor` checks a process environment
// against the same table, so what the doctor calls valid is exactly what
// the runtime accepts. Python and C++ read their few variables themselves;
// a test keeps the table in step with every name the sources mention.
package envvars

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind is how a variable's value is parsed.
type Kind int

// Kinds of values.
const (
	// Text is any string.
	Text Kind = iota
	// Bool is 1/true/yes/on or 0/false/no/off (any case).
	Bool
	// Int is a decimal integer in [Min, Max].
	Int
	// Seconds is a decimal number of seconds (fractions allowed) in [Min, Max].
	Seconds
	// Enum is one of Values, exactly.
	Enum
	// IP is an IPv4 or IPv6 address.
	IP
	// File is the path of an existing regular file.
	File
)

// Var describes one environment variable.
type Var struct {
	// Name is the variable's name.
	Name string
	// Kind is how the value is parsed.
	Kind Kind
	// Min and Max bound Int and Seconds values (inclusive); Max 0 means
	// no upper bound.
	Min, Max float64
	// Values are the accepted values of an Enum.
	Values []string
	// Default is what applies when the variable is unset or invalid, as
	// documentation ("30", "host of local_hostname").
	Default string
	// ReadBy names what reads it ("transfer", "kvstore/client", "python",
	// ...); empty for upstream variables Mooncake-Go does not read.
	ReadBy string
	// Doc says what it does.
	Doc string
	// Secret marks a value that tools must not show (a token, a key).
	Secret bool
}

// Upstream reports whether the variable is one of upstream Mooncake's that
// this implementation does not read.
func (v *Var) Upstream() bool { return v.ReadBy == "" }

// Lookup returns the variable's value with surrounding white space
// removed, and whether it is set to something other than white space.
func (v *Var) Lookup() (string, bool) {
	s := strings.TrimSpace(os.Getenv(v.Name))
	return s, s != ""
}

// Validate checks a value against the variable's kind and range. The
// error says what is wrong in words meant for an operator.
func (v *Var) Validate(s string) error {
	s = strings.TrimSpace(s)
	switch v.Kind {
	case Bool:
		_, err := parseBool(s)
		return err
	case Int:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("is not an integer")
		}
		return v.inRange(float64(n))
	case Seconds:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("is not a number of seconds (write 30, not 30s)")
		}
		return v.inRange(f)
	case Enum:
		if !slices.Contains(v.Values, s) {
			return fmt.Errorf("is not one of %s", strings.Join(v.Values, ", "))
		}
	case IP:
		if net.ParseIP(s) == nil {
			return fmt.Errorf("is not an IP address")
		}
	case File:
		st, err := os.Stat(s)
		if err != nil {
			return fmt.Errorf("names no readable file (%v)", err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("is not a regular file")
		}
	}
	return nil
}

// Range describes the accepted values of an Int or Seconds variable, ""
// for other kinds.
func (v *Var) Range() string {
	if v.Kind != Int && v.Kind != Seconds {
		return ""
	}
	if v.Max == 0 {
		return fmt.Sprintf("at least %s", formatNum(v.Min))
	}
	return fmt.Sprintf("%s to %s", formatNum(v.Min), formatNum(v.Max))
}

func (v *Var) inRange(f float64) error {
	if f < v.Min || v.Max != 0 && f > v.Max {
		return fmt.Errorf("is out of range (%s)", v.Range())
	}
	return nil
}

func formatNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// Complaint is the one wording of an invalid value, shared by the runtime's
// log line and `mooncake doctor`.
func (v *Var) Complaint(value string, err error) string {
	return fmt.Sprintf("%s=%q %v; it is ignored and the default (%s) applies", v.Name, value, err, v.Default)
}

// Int returns the variable as an integer, or def when it is unset or
// invalid (an invalid value is logged once).
func (v *Var) Int(def int) int {
	s, ok := v.valid()
	if !ok {
		return def
	}
	n, _ := strconv.Atoi(s)
	return n
}

// Duration returns a Seconds variable as a duration, or def when it is
// unset or invalid (an invalid value is logged once).
func (v *Var) Duration(def time.Duration) time.Duration {
	s, ok := v.valid()
	if !ok {
		return def
	}
	f, _ := strconv.ParseFloat(s, 64)
	return time.Duration(f * float64(time.Second))
}

// Enabled returns a Bool variable's value; false when unset or invalid (an
// invalid value is logged once).
func (v *Var) Enabled() bool {
	s, ok := v.valid()
	if !ok {
		return false
	}
	b, _ := parseBool(s)
	return b
}

// Value returns the variable's value, "" when unset or invalid (an invalid
// value is logged once).
func (v *Var) Value() string {
	s, _ := v.valid()
	return s
}

// valid returns the value when it is set and valid; an invalid value is
// logged once per process and value, with a pointer to the doctor.
func (v *Var) valid() (string, bool) {
	s, ok := v.Lookup()
	if !ok {
		return "", false
	}
	if err := v.Validate(s); err != nil {
		if _, seen := warned.LoadOrStore(v.Name+"="+s, true); !seen {
			slog.Warn(v.Complaint(s, err) + " (run `mooncake doctor` to check the environment)")
		}
		return "", false
	}
	return s, true
}

// warned holds the name=value pairs already logged as invalid.
var warned sync.Map

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("is not a boolean (1/true/yes/on or 0/false/no/off)")
}

// Find returns the variable named name, or nil.
func Find(name string) *Var {
	for _, v := range All {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// Closest returns the known variable whose name is nearest to name (at
// most two edits away), or nil: a guess at what a mistyped name meant.
func Closest(name string) *Var {
	var best *Var
	bestD := 3
	for _, v := range All {
		if d := editDistance(name, v.Name); d < bestD {
			best, bestD = v, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
