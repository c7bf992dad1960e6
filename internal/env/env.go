// Package env reads settings from environment variables, with one rule for
// numbers everywhere in the module: an unset (or empty) variable means the
// default; a value that is not a number, or is not positive, is rejected
// with a warning (once per variable and value) and the default is used. So
// a setting such as MC_RPC_TIMEOUT_MS=0 cannot make every call fail.
package env

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Int returns the positive integer in variable name, else def.
func Int(name string, def int) int {
	s, ok := lookup(name)
	if !ok {
		return def
	}
	if v, err := strconv.Atoi(s); err == nil && v > 0 {
		return v
	}
	reject(name, s, "a positive integer", def)
	return def
}

// Seconds returns the positive number of seconds in variable name
// (fractions allowed: "0.5"), else def.
func Seconds(name string, def time.Duration) time.Duration {
	s, ok := lookup(name)
	if !ok {
		return def
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil && v > 0 && v < float64(1<<63-1)/float64(time.Second) {
		return time.Duration(v * float64(time.Second))
	}
	reject(name, s, "a positive number of seconds", def)
	return def
}

// Bool reports whether variable name is set to 1, true, yes or on (any
// case); anything else, and unset, is false.
func Bool(name string) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(name))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

func lookup(name string) (string, bool) {
	s := strings.TrimSpace(os.Getenv(name))
	return s, s != ""
}

var warned sync.Map // "name=value" already warned about

func reject(name, value, want string, def any) {
	if _, dup := warned.LoadOrStore(name+"="+value, true); dup {
		return
	}
	slog.Warn("ignoring invalid environment setting, using the default", "var", name, "value", value, "want", want, "default", def)
}
