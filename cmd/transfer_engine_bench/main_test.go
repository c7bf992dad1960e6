package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/testutil"
)

// reexecEnv makes the test binary run main() instead of the tests, so exit
// codes are checked on a real process without go build.
const reexecEnv = "MOONCAKE_TEST_RUN_TE_BENCH_MAIN"

func TestMain(m *testing.M) { testutil.RunTestsOrMain(m, reexecEnv, main) }

func runMain(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), reexecEnv+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func TestHelpExitsZero(t *testing.T) {
	code, out := runMain(t, "--help")
	if code != 0 {
		t.Fatalf("--help exited %d:\n%s", code, out)
	}
	for _, want := range []string{"-mode", "-segment_id", "-block_size", "65536", "-batch_size", "-threads",
		"-duration", "-buffer_size", "1073741824", "-operation", "-protocol", "-metadata_server", "P2PHANDSHAKE", "-report"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "server"}, "--mode"},
		{[]string{"--segment_id", "x", "--operation", "copy"}, "--operation"},
		{[]string{"--segment_id", "x", "--protocol", "rdma"}, "rdma"},
		{[]string{"--operation", "write"}, "--segment_id is required"},
		{[]string{"--segment_id", "x", "--threads", "0"}, "--threads"},
		{[]string{"--segment_id", "x", "--duration", "-1"}, "--duration"},
		{[]string{"--segment_id", "x", "--block_size", "1048576", "--buffer_size", "1048576"}, "does not fit"},
		{[]string{"--segment_id", "x", "--block_size", "18446744073709551615"}, "does not fit"},
		{[]string{"--segment_id", "x", "--report", "xml"}, "--report"},
		{[]string{"--segment_id", "x", "--warmup_batches", "-1"}, "--warmup_batches"},
		{[]string{"--metadata_server", "zk://h:1", "--mode", "target"}, "--metadata_server"},
		{[]string{"--metadata_server", "redis://h1:1,h2:2", "--mode", "target"}, "--metadata_server"},
		{[]string{"--nosuchflag"}, "nosuchflag"},
		{[]string{"--mode", "target", "extra"}, "unexpected"},
	} {
		var out bytes.Buffer
		err := run(tc.args, io.Discard, &out, nil)
		if !errors.As(err, new(cli.UsageError)) {
			t.Errorf("run(%q) = %v, want a usage error", tc.args, err)
			continue
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("run(%q) printed %q, want it to mention %q", tc.args, out.String(), tc.want)
		}
	}
	if code, out := runMain(t, "--mode", "nope"); code != 2 {
		t.Errorf("bad --mode exited %d, want 2:\n%s", code, out)
	}
	var out bytes.Buffer
	if err := run([]string{"-h"}, io.Discard, &out, nil); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("run(-h) = %v, want flag.ErrHelp", err)
	}
}

var targetLine = regexp.MustCompile(`^TARGET segment=(\S+) addr=(0x[0-9a-f]+) size=(\d+) protocol=(\w+)$`)

// startTarget runs a target in-process and returns its segment name; the
// target stops at the end of the test.
func startTarget(t *testing.T, protocol string, bufferSize string) string {
	t.Helper()
	pr, pw := io.Pipe()
	stop := make(chan os.Signal, 1)
	errc := make(chan error, 1)
	go func() {
		err := run([]string{"--mode", "target", "--protocol", protocol, "--buffer_size", bufferSize}, pw, io.Discard, stop)
		pw.CloseWithError(io.EOF)
		errc <- err
	}()
	t.Cleanup(func() {
		stop <- syscall.SIGTERM
		if err := <-errc; err != nil {
			t.Errorf("target: %v", err)
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		m := targetLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("target printed %q, want a TARGET line", line)
		}
		if m[3] != bufferSize || m[4] != protocol {
			t.Fatalf("TARGET line %q: want size=%s protocol=%s", line, bufferSize, protocol)
		}
		return m[1]
	case err := <-errc:
		t.Fatalf("target exited: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("target printed no TARGET line")
	}
	return ""
}

func TestTargetAndInitiator(t *testing.T) {
	for _, protocol := range []string{"shm", "tcp"} {
		for _, op := range []string{"write", "read"} {
			t.Run(protocol+"_"+op, func(t *testing.T) {
				const buf = "16777216"
				seg := startTarget(t, protocol, buf)
				warmup := map[string]int{"write": 0, "read": 2}[op]
				var stdout, stderr testutil.SyncBuffer
				err := run([]string{"--mode", "initiator", "--segment_id", seg, "--protocol", protocol,
					"--operation", op, "--block_size", "65536", "--batch_size", "16", "--threads", "2",
					"--duration", "0.5", "--buffer_size", buf, "--report", "json",
					"--warmup_batches", strconv.Itoa(warmup)}, &stdout, &stderr, nil)
				if err != nil {
					t.Fatalf("initiator: %v\nstderr:\n%s", err, stderr.String())
				}
				var r result
				if err := json.Unmarshal([]byte(strings.TrimSpace(stdout.String())), &r); err != nil {
					t.Fatalf("report %q: %v", stdout.String(), err)
				}
				if r.Bytes == 0 || r.Requests == 0 || r.Batches == 0 || r.GBps <= 0 {
					t.Errorf("report moved nothing: %+v", r)
				}
				if r.Failures != 0 || r.Error != "" {
					t.Errorf("report has failures: %+v", r)
				}
				if r.Bytes != r.Requests*65536 || r.Requests != r.Batches*16 {
					t.Errorf("report totals inconsistent: %+v", r)
				}
				if r.Transport != protocol || r.Operation != op || r.Protocol != protocol || r.WarmupBatches != warmup {
					t.Errorf("report = %+v, want %s over %s after %d warm-up batches", r, op, protocol, warmup)
				}
				if r.Seconds < 0.5 || r.Seconds > 10 {
					t.Errorf("report duration %.3f s, want about 0.5 s", r.Seconds)
				}
			})
		}
	}
}

func TestInitiatorUnreachableTarget(t *testing.T) {
	// Nothing listens on port 1: opening the segment must fail promptly.
	var stdout, stderr testutil.SyncBuffer
	err := run([]string{"--segment_id", "127.0.0.1:1", "--duration", "0.2", "--buffer_size", "33554432"}, &stdout, &stderr, nil)
	if err == nil || errors.As(err, new(cli.UsageError)) {
		t.Fatalf("run against a dead target = %v, want a runtime error", err)
	}
}

func TestInitiatorFootprintExceedsTarget(t *testing.T) {
	seg := startTarget(t, "tcp", "1048576")
	var stdout, stderr testutil.SyncBuffer
	err := run([]string{"--segment_id", seg, "--protocol", "tcp", "--duration", "0.2", "--threads", "1",
		"--batch_size", "32", "--buffer_size", "4194304"}, &stdout, &stderr, nil)
	if err == nil || !strings.Contains(err.Error(), "does not fit the target") {
		t.Fatalf("err = %v, want the target's buffer to be too small", err)
	}
}
