// Package cli holds what the commands under cmd/ share about their command
// lines: the error that means "bad usage" and the exit status each kind of
// error maps to (0 for --help, 2 for bad usage as the flag package does, 1
// for anything else).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// UsageError is a command-line error: the command exits 2 on it, after
// printing it (and usually the usage).
type UsageError struct{ Err error }

// Error implements error.
func (e UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e UsageError) Unwrap() error { return e.Err }

// ExitCode is the exit status for a run that ended with err: 0 for none or
// flag.ErrHelp, 2 for a UsageError, 1 otherwise.
func ExitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(UsageError)):
		return 2
	}
	return 1
}

// Report is how a command ends a run: for an error other than --help and
// bad usage (which flag and the command have printed already) it prints
// "name: err" to w, and the hint for it when hint (may be nil) has one. It
// returns the exit status (ExitCode).
func Report(w io.Writer, name string, err error, hint func(error) string) int {
	code := ExitCode(err)
	if code == 1 {
		fmt.Fprintf(w, "%s: %v\n", name, err)
		if hint != nil {
			if h := hint(err); h != "" {
				fmt.Fprintf(w, "%s: %s\n", name, h)
			}
		}
	}
	return code
}

// Parse parses args into fs: flag.ErrHelp for --help, a UsageError for
// anything flag refuses (flag has printed it), nil otherwise.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return UsageError{Err: err}
	}
	return nil
}
