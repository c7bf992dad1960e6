package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{flag.ErrHelp, 0},
		{fmt.Errorf("parse: %w", flag.ErrHelp), 0},
		{UsageError{errors.New("bad flag")}, 2},
		{fmt.Errorf("setup: %w", UsageError{errors.New("bad value")}), 2},
		{errors.New("listen: address in use"), 1},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	u := UsageError{errors.New("x")}
	if u.Error() != "x" || !errors.Is(u, u.Err) {
		t.Errorf("UsageError does not wrap its error: %v", u)
	}
}

func TestReport(t *testing.T) {
	hint := func(err error) string {
		if err.Error() == "port taken" {
			return "free the port"
		}
		return ""
	}
	var b bytes.Buffer
	if code := Report(&b, "cmd", errors.New("port taken"), hint); code != 1 || b.String() != "cmd: port taken\ncmd: free the port\n" {
		t.Errorf("code %d, printed %q", code, b.String())
	}
	b.Reset()
	if code := Report(&b, "cmd", errors.New("other"), nil); code != 1 || b.String() != "cmd: other\n" {
		t.Errorf("code %d, printed %q", code, b.String())
	}
	b.Reset()
	for _, err := range []error{nil, flag.ErrHelp, UsageError{errors.New("bad")}} {
		if code := Report(&b, "cmd", err, hint); code != ExitCode(err) || b.Len() != 0 {
			t.Errorf("%v: code %d, printed %q", err, code, b.String())
		}
	}
}

func TestParse(t *testing.T) {
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		fs.Int("port", 0, "")
		return fs
	}
	if err := Parse(newFS(), []string{"--port", "5"}); err != nil {
		t.Errorf("good flags: %v", err)
	}
	if err := Parse(newFS(), []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	if err := Parse(newFS(), []string{"--port", "x"}); ExitCode(err) != 2 {
		t.Errorf("bad value: %v (exit %d)", err, ExitCode(err))
	}
}
