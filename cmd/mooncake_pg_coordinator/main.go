// Command mooncake_pg_coordinator serves the membership coordinator of
// Mooncake process groups (backend="mooncake") in a process of its own, so
// that no rank's death takes it down.
//
// The founding rank 0 of a job starts it (MC_PG_COORDINATOR=process, the
// default where this command is installed beside libmooncake.so) with
// --announce, reads the address from its first line, and publishes it to
// the other ranks through the rendezvous store. An operator can also run
// it by hand and point every rank at it with MC_PG_COORDINATOR=host:port.
//
// It admits only calls that carry the job secret it finds in
// MC_PG_COORDINATOR_SECRET (rank 0 sets it to a random value, which the
// ranks share through the rendezvous store; an operator sets the same value
// for it and every rank); unset, it admits every client.
//
// Usage:
//
//	mooncake_pg_coordinator [--host 127.0.0.1] [--port 0] [--idle_exit_seconds 0]
//	                        [--first_client_timeout_seconds 0] [--term 0] [--announce]
//
// When the coordinator is lost, a rank starts a new one with the next
// --term (docs/collectives.md, "Coordinator failover").
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/backend"
	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

func main() {
	// Started by a rank whose stderr may be a pipe that dies with it: a
	// log line must not kill the coordinator with SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	err := run(os.Args[1:], os.Stdout, os.Stderr, stop)
	os.Exit(cli.Report(os.Stderr, "mooncake_pg_coordinator", err, nil))
}

// run parses args and serves until a signal arrives on stop or the idle
// rules below end it. The announcement goes to out, usage and logs to log.
func run(args []string, out, log io.Writer, stop <-chan os.Signal) error {
	fs := flag.NewFlagSet("mooncake_pg_coordinator", flag.ContinueOnError)
	fs.SetOutput(log)
	host := fs.String("host", "127.0.0.1", "address to bind (ranks on other hosts need one they can reach)")
	port := fs.Int("port", 0, "TCP port to listen on (0: any free port)")
	idle := fs.Float64("idle_exit_seconds", 0, "exit once no rank has been connected for this long, after the first connected (0: never)")
	first := fs.Float64("first_client_timeout_seconds", 0, "exit if no rank connects within this long (0: wait for ever)")
	var tlsFiles tlsconf.Files
	tlsFiles.AddFlags(fs)
	term := fs.Uint64("term", 0, "the coordinator's term: 0 for a job's first, more for one a rank started when the one before was lost")
	announce := fs.Bool("announce", false, `print "listening on HOST:PORT" as the first line of standard output once serving`)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\n"+
			"Serves the membership coordinator of Mooncake process groups (group rendezvous,\n"+
			"failure reconciliation, elastic membership) over gRPC, outside every rank.\n"+
			"Ranks find it through MC_PG_COORDINATOR=host:port, or rank 0 starts one itself.\n\nFlags:\n", fs.Name())
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		err := fmt.Errorf("unexpected arguments: %q", fs.Args())
		fmt.Fprintln(log, err)
		fs.Usage()
		return cli.UsageError{Err: err}
	case *port < 0 || *port > 65535:
		err := fmt.Errorf("--port %d: not a TCP port", *port)
		fmt.Fprintln(log, err)
		return cli.UsageError{Err: err}
	case *idle < 0 || *first < 0:
		err := errors.New("--idle_exit_seconds and --first_client_timeout_seconds must not be negative")
		fmt.Fprintln(log, err)
		return cli.UsageError{Err: err}
	}
	tlsCfg, err := tlsFiles.Server()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	w := newIdleWatch(seconds(*idle), seconds(*first))
	secret, _ := envvars.PGCoordinatorSecret.Lookup()
	c := backend.ServeCoordinator(ln, w, secret, *term, tlsCfg)
	defer c.Stop()
	logger := slog.New(slog.NewTextHandler(log, nil))
	logger.Info("mooncake_pg_coordinator serving", "addr", c.Addr(), "pid", os.Getpid(), "term", *term,
		"tls", tlsCfg != nil, "mutual_tls", tlsFiles.CAFile != "")
	if *announce {
		if _, err := fmt.Fprintf(out, "listening on %s\n", c.Addr()); err != nil {
			return fmt.Errorf("announce: %w", err)
		}
	}
	select {
	case s := <-stop:
		logger.Info("mooncake_pg_coordinator stopping", "signal", s.String())
	case why := <-w.done:
		logger.Info("mooncake_pg_coordinator exiting", "reason", why)
	}
	return nil
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// idleWatch counts client connections and says (done) when the process
// should end: no connection within first of starting, or none for idle
// after the last one closed. A zero duration disables that rule.
type idleWatch struct {
	mu    sync.Mutex
	n     int
	timer *time.Timer
	idle  time.Duration
	done  chan string
}

func newIdleWatch(idle, first time.Duration) *idleWatch {
	w := &idleWatch{idle: idle, done: make(chan string, 1)}
	if first > 0 {
		w.timer = time.AfterFunc(first, func() { w.end(fmt.Sprintf("no rank connected within %v", first)) })
	}
	return w
}

func (w *idleWatch) end(why string) {
	select {
	case w.done <- why:
	default:
	}
}

// ConnOpened implements backend.ConnWatcher.
func (w *idleWatch) ConnOpened() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}

// ConnClosed implements backend.ConnWatcher.
func (w *idleWatch) ConnClosed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if w.n > 0 || w.idle <= 0 {
		return
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.timer = time.AfterFunc(w.idle, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.n == 0 {
			w.end(fmt.Sprintf("no rank connected for %v", w.idle))
		}
	})
}
