// Command transfer_engine_bench measures Transfer Engine throughput, as
// upstream Mooncake's example/transfer_engine_bench does and with the same
// flag names and defaults (block 64 KiB, batch 128, 12 threads, 10 s,
// 1 GiB buffer; threads are capped at twice the CPUs here).
//
// Start a target, which registers a buffer and serves until SIGINT or
// SIGTERM, then point an initiator at the segment name it prints:
//
//	transfer_engine_bench --mode target
//	  TARGET segment=127.0.0.1:15321 addr=0x7f... size=1073741824 protocol=shm
//	transfer_engine_bench --mode initiator --segment_id 127.0.0.1:15321 --operation write
//
// --protocol shm uses engine-managed buffers on both sides, so a same-host
// peer is reached by memcpy through shared memory; --protocol tcp forces
// the TCP transport. --report json prints the result as one JSON line.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/logging"
	"github.com/mooncake-go/mooncake/transfer"
)

func main() {
	logging.Setup()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	err := run(os.Args[1:], os.Stdout, os.Stderr, stop)
	os.Exit(cli.Report(os.Stderr, "transfer_engine_bench", err, nil))
}

// run parses args and runs the target or the initiator. Results go to
// stdout; usage, progress and diagnostics to stderr. A value on stop ends
// a target, or an initiator's run early. It returns flag.ErrHelp for
// --help and a cli.UsageError for bad flags.
func run(args []string, stdout, stderr io.Writer, stop <-chan os.Signal) (err error) {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("--cpuprofile: %w", cerr)
			}
		}()
	}
	if o.mode == "target" {
		return runTarget(o, stdout, stop)
	}
	return runInitiator(o, stdout, stderr, stop)
}

// newEngine starts the engine the options describe.
func newEngine(o *options) (*transfer.Engine, error) {
	e, err := transfer.New(transfer.Config{
		LocalHostname:  o.localServerName,
		MetadataServer: o.metadataServer,
		ForceTCP:       o.protocol == "tcp",
	})
	if err != nil {
		return nil, fmt.Errorf("start transfer engine: %w", err)
	}
	return e, nil
}
