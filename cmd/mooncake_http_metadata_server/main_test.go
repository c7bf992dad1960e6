package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/testutil"
)

// reexecEnv makes the test binary run main() instead of the tests, so exit
// codes and signal handling are checked on a real process without go build.
const reexecEnv = "MOONCAKE_TEST_RUN_METADATA_SERVER_MAIN"

func TestMain(m *testing.M) { testutil.RunTestsOrMain(m, reexecEnv, main) }

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-help", "-h"} {
		var out bytes.Buffer
		err := run([]string{arg}, &out, nil)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("run(%s) = %v, want flag.ErrHelp", arg, err)
		}
		for _, want := range []string{"-port", "-host", "8080", "0.0.0.0"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("run(%s) usage lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"--port", "notanumber"},
		{"--port", "70000"},
		{"--max_keys", "-1"},
		{"--max_bytes", "-1"},
		{"--nosuchflag"},
		{"extra"},
	} {
		var out bytes.Buffer
		err := run(args, &out, nil)
		if !errors.As(err, new(cli.UsageError)) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

// startRun runs the server in-process on a free loopback port and returns
// its base URL; it is stopped at cleanup.
func startRun(t *testing.T) string {
	t.Helper()
	port := testutil.FreePorts(t, 1)[0]
	stop := make(chan os.Signal, 1)
	done := make(chan error, 1)
	out := &testutil.SyncBuffer{}
	go func() {
		done <- run([]string{"--host", "127.0.0.1", "--port", fmt.Sprint(port)}, out, stop)
	}()
	t.Cleanup(func() {
		stop <- os.Interrupt
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run returned %v on stop", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("run did not return after stop")
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitHealthy(t, base, done)
	if log := out.String(); !strings.Contains(log, "HTTP metadata server started") ||
		!strings.Contains(log, fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Errorf("startup log lacks the address:\n%s", log)
	}
	return base
}

// startBinary starts the server with args, its output gathered in out;
// exited receives its exit, and it is killed when the test ends.
func startBinary(t *testing.T, args ...string) (out *testutil.SyncBuffer, exited <-chan error) {
	t.Helper()
	cmd := command(args...)
	out = &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return out, done
}

// waitHealthy polls /health until it answers OK, bounded.
func waitHealthy(t *testing.T, base string, exited <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("server exited before serving: %v", err)
		default:
		}
		resp, err := http.Get(base + "/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && string(b) == "OK" {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s/health not OK within 10s", base)
}

func putGet(t *testing.T, base string) {
	t.Helper()
	u := base + "/metadata?key=mooncake%2Fram%2F127.0.0.1%3A1234"
	req, _ := http.NewRequest(http.MethodPut, u, strings.NewReader(`{"name":"x"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "metadata updated" {
		t.Fatalf("PUT = %d %q", resp.StatusCode, b)
	}
	resp, err = http.Get(u)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"name":"x"}` {
		t.Fatalf("GET = %d %q", resp.StatusCode, b)
	}
}

func TestServeInProcess(t *testing.T) {
	putGet(t, startRun(t))
}

func TestPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	var out bytes.Buffer
	err = run([]string{"--host", "127.0.0.1", "--port", fmt.Sprint(port)}, &out, nil)
	if err == nil || errors.As(err, new(cli.UsageError)) || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("run on a taken port = %v, want a listen error", err)
	}
}

// command returns the test binary re-executed as the server.
func command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), reexecEnv+"=1")
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("run binary: %v", err)
	}
	return ee.ExitCode()
}

func TestBinaryExitCodes(t *testing.T) {
	out, err := command("--help").CombinedOutput()
	if code := exitCode(t, err); code != 0 || !strings.Contains(string(out), "-port") ||
		!strings.Contains(string(out), "-host") {
		t.Fatalf("--help: exit %d, output:\n%s", code, out)
	}

	out, err = command("--bogus").CombinedOutput()
	if code := exitCode(t, err); code != 2 {
		t.Fatalf("--bogus: exit %d, want 2; output:\n%s", code, out)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	out, err = command("--host", "127.0.0.1", "--port", fmt.Sprint(port)).CombinedOutput()
	if code := exitCode(t, err); code != 1 || !strings.Contains(string(out), "listen") {
		t.Fatalf("taken port: exit %d, want 1; output:\n%s", code, out)
	}
}

func TestBinarySignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			port := testutil.FreePorts(t, 1)[0]
			cmd := command("--host", "127.0.0.1", "--port", fmt.Sprint(port))
			out := &testutil.SyncBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			waited := false
			t.Cleanup(func() {
				if !waited {
					_ = cmd.Process.Kill()
					<-exited
				}
			})

			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			waitHealthy(t, base, exited)
			putGet(t, base)

			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				waited = true
				if code := exitCode(t, err); code != 0 {
					t.Fatalf("exit %d after %v; output:\n%s", code, sig, out)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("still running 10s after %v; output:\n%s", sig, out)
			}
			if !strings.Contains(out.String(), "HTTP metadata server stopped") {
				t.Errorf("no stop log:\n%s", out)
			}
		})
	}
}

func TestBinaryHoldsAtMostItsBudget(t *testing.T) {
	port := testutil.FreePorts(t, 1)[0]
	_, exited := startBinary(t, "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--max_keys", "16", "--max_bytes", "4096")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitHealthy(t, base, exited)
	putGet(t, base) // one key of a well-behaved engine

	put := func(key, value string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, base+"/metadata?key="+key, strings.NewReader(value))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	refused := 0
	for i := range 100 {
		switch code, body := put(fmt.Sprint("flood-", i), "0123456789"); {
		case code == http.StatusInsufficientStorage && strings.Contains(body, "metadata store full"):
			refused++
		case code != http.StatusOK:
			t.Fatalf("PUT %d: %d %q", i, code, body)
		}
	}
	if refused != 100-15 {
		t.Fatalf("%d of 100 PUTs refused by a server of 16 keys holding one", refused)
	}
	putGet(t, base) // the engine still reads and rewrites its key
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"mooncake_http_metadata_keys 16\n", "mooncake_http_metadata_refused_puts_total{limit=\"keys\"} 85\n"} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, b)
		}
	}
}
