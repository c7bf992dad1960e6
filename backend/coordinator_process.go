package backend

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

// Where the coordinator runs (MC_PG_COORDINATOR).
//
// In its own process (the default where the mooncake_pg_coordinator
// command is installed): the founding rank 0 starts it in a session of its
// own, so that neither rank 0's death nor a signal to rank 0's process
// group reaches it. Every rank of the job, rank 0 included, is then an
// ordinary client: rank 0 can die and its slot can be taken by a
// replacement like any other. The process exits by itself once no rank has
// been connected to it for coordinatorIdleExit.
//
// Inside rank 0 (inprocess): as upstream; rank 0's death takes the
// coordinator with it, and the survivors' next ops fail.
//
// At a given address (host:port): a mooncake_pg_coordinator started by the
// operator; no rank starts one, and no rank needs the rendezvous store to
// find it.

// CoordinatorPlace is where the coordinator runs: MC_PG_COORDINATOR
// parsed. The zero value is inside the founding rank 0.
type CoordinatorPlace struct {
	Process bool   // a mooncake_pg_coordinator process that rank 0 starts
	Addr    string // a running coordinator at this address; nobody starts one
}

// Values of MC_PG_COORDINATOR besides an address.
const (
	coordinatorInProcess = "inprocess"
	coordinatorProcess   = "process"
)

// CoordinatorCommand is the command that serves a coordinator in its own
// process (cmd/mooncake_pg_coordinator).
const CoordinatorCommand = "mooncake_pg_coordinator"

// coordinatorIdleExit is how long a coordinator process that a rank
// started waits, once no rank is connected, before it exits.
const coordinatorIdleExit = 10 * time.Second

// PlaceCoordinator says where the coordinator runs for a value of
// MC_PG_COORDINATOR ("" when unset), given whether the coordinator command
// is installed. A value that names no placement is an error.
func PlaceCoordinator(value string, installed bool) (CoordinatorPlace, error) {
	v := strings.TrimSpace(value)
	switch {
	case v == "" && installed:
		return CoordinatorPlace{Process: true}, nil
	case v == "", v == coordinatorInProcess:
		return CoordinatorPlace{}, nil
	case v == coordinatorProcess:
		if !installed {
			return CoordinatorPlace{}, fmt.Errorf("%w: %s=%s but no %s command was found beside libmooncake.so",
				ErrInvalid, envvars.PGCoordinator.Name, v, CoordinatorCommand)
		}
		return CoordinatorPlace{Process: true}, nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil || host == "" || port == "" || port == "0" {
		return CoordinatorPlace{}, fmt.Errorf("%w: %s=%q: want %s, %s or host:port of a running %s",
			ErrInvalid, envvars.PGCoordinator.Name, v, coordinatorProcess, coordinatorInProcess, CoordinatorCommand)
	}
	return CoordinatorPlace{Addr: v}, nil
}

// coordinatorPlacement reads MC_PG_COORDINATOR; bin is the coordinator
// command the runtime knows ("" when none is installed).
func coordinatorPlacement(bin string) (CoordinatorPlace, error) {
	v, _ := envvars.PGCoordinator.Lookup()
	return PlaceCoordinator(v, bin != "")
}

// coordinatorStartTimeout bounds how long a started coordinator process
// may take to announce its address.
const coordinatorStartTimeout = 30 * time.Second

// spawnCoordinator starts bin serving term on host in a session of its own,
// admitting calls that carry secret (passed in its environment, which only
// its user can read, not on its command line), and returns the address it
// listens on, which it prints as its first line. It serves TLS with this
// process's MC_TLS_* files, given as its --tls_* flags.
// The process exits by itself unless a rank connects within firstClient
// (so one whose address could not be published goes away on its own). It
// is reaped here while this process lives, and outlives it otherwise.
func spawnCoordinator(bin, host string, firstClient time.Duration, secret string, term uint64) (string, error) {
	cmd := exec.Command(bin, "--host", host, "--port", "0", "--term", fmt.Sprint(term),
		"--idle_exit_seconds", fmt.Sprint(coordinatorIdleExit.Seconds()),
		"--first_client_timeout_seconds", fmt.Sprint(firstClient.Seconds()), "--announce")
	if f := tlsconf.FromEnv(); f.Enabled() {
		cmd.Args = append(cmd.Args, "--tls_cert_file", f.CertFile, "--tls_key_file", f.KeyFile, "--tls_ca_file", f.CAFile)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = append(os.Environ(), envvars.PGCoordinatorSecret.Name+"="+secret)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	// Its log reaches this process's standard error through a pipe of its
	// own, not by inheriting descriptor 2: a caller that reads this
	// process's output until EOF (subprocess.run with capture_output) must
	// not wait for the coordinator, which outlives this process.
	logs, err := cmd.StderrPipe()
	if err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() {
		s, err := bufio.NewReader(out).ReadString('\n')
		got <- line{s, err}
	}()
	fail := func(err error) (string, error) {
		cmd.Process.Kill()
		cmd.Wait()
		return "", err
	}
	select {
	case l := <-got:
		addr, ok := strings.CutPrefix(strings.TrimSpace(l.s), "listening on ")
		if l.err != nil || !ok {
			return fail(fmt.Errorf("%s (pid %d) did not announce its address: %q %v", bin, cmd.Process.Pid, l.s, l.err))
		}
		go func() { // forward its log, then reap it should it exit before this process does
			io.Copy(os.Stderr, logs)
			cmd.Wait()
		}()
		return addr, nil
	case <-time.After(coordinatorStartTimeout):
		return fail(fmt.Errorf("%s (pid %d) did not announce its address in %v", bin, cmd.Process.Pid, coordinatorStartTimeout))
	}
}
