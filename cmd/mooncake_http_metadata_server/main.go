// Command mooncake_http_metadata_server serves the upstream-compatible HTTP
// metadata store that Transfer Engines use with a metadata server of the
// form "http://host:port/metadata". It keeps everything in memory.
//
// Usage:
//
//	mooncake_http_metadata_server [--host 0.0.0.0] [--port 8080] [--max_keys N] [--max_bytes N]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/cmd/mooncake/troubleshoot"
	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/transfer/metaserver"
)

// shutdownTimeout bounds how long in-flight requests may finish on a stop
// signal.
const shutdownTimeout = 5 * time.Second

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	err := run(os.Args[1:], os.Stderr, stop)
	os.Exit(cli.Report(os.Stderr, "mooncake_http_metadata_server", err, troubleshoot.HintFor))
}

// run parses args, serves until a value arrives on stop, then shuts down
// gracefully. Usage and logs go to out. It returns flag.ErrHelp for --help.
func run(args []string, out io.Writer, stop <-chan os.Signal) error {
	fs := flag.NewFlagSet("mooncake_http_metadata_server", flag.ContinueOnError)
	fs.SetOutput(out)
	port := fs.Int("port", 8080, "TCP port to listen on")
	host := fs.String("host", "0.0.0.0", "address to bind")
	maxKeys := fs.Int("max_keys", metaserver.DefaultMaxKeys, "keys the store holds at most; a PUT of a new key beyond is answered 507 (0: no limit)")
	var tlsFiles tlsconf.Files
	tlsFiles.AddFlags(fs)
	maxBytes := fs.Int64("max_bytes", metaserver.DefaultMaxBytes, "bytes of keys and values the store holds at most; a PUT that would grow it beyond is answered 507 (0: no limit)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [--host HOST] [--port PORT] [--max_keys N] [--max_bytes N]\n\n"+
			"Serves the Mooncake HTTP metadata store (GET/PUT/DELETE /metadata?key=K, GET /health)\n"+
			"from memory, and its size and refusals at GET /metrics.\n\nFlags:\n", fs.Name())
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(out, "unexpected arguments: %q\n", fs.Args())
		fs.Usage()
		return cli.UsageError{Err: fmt.Errorf("unexpected arguments: %q", fs.Args())}
	}
	if *port < 0 || *port > 65535 {
		err := fmt.Errorf("invalid port %d", *port)
		fmt.Fprintln(out, err)
		return cli.UsageError{Err: err}
	}
	if *maxKeys < 0 || *maxBytes < 0 {
		err := fmt.Errorf("invalid --max_keys %d or --max_bytes %d (0: no limit)", *maxKeys, *maxBytes)
		fmt.Fprintln(out, err)
		return cli.UsageError{Err: err}
	}

	tlsCfg, err := tlsFiles.Server()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(out, nil))
	addr := net.JoinHostPort(*host, strconv.Itoa(*port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	bound := ln.Addr().String()
	ln = tlsconf.Listen(ln, tlsCfg)
	srv := &http.Server{
		Handler:           metaserver.NewLimited(metaserver.Limits{MaxKeys: *maxKeys, MaxBytes: *maxBytes}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Logged before serving (the listener already accepts): whoever sees
	// the server answer has the line.
	log.Info("HTTP metadata server started", "addr", bound, "max_keys", *maxKeys, "max_bytes", *maxBytes,
		"tls", tlsCfg != nil, "mutual_tls", tlsFiles.CAFile != "")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case sig := <-stop:
		log.Info("HTTP metadata server stopping", "signal", fmt.Sprint(sig))
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("HTTP metadata server stopped")
	return nil
}
