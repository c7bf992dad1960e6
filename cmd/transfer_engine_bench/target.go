package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
)

// runTarget allocates and registers the buffer, announces it on stdout
// and serves peers until a value arrives on stop.
func runTarget(o *options, stdout io.Writer, stop <-chan os.Signal) error {
	e, err := newEngine(o)
	if err != nil {
		return err
	}
	defer e.Close()
	// The target's buffer is always engine-managed: with --protocol tcp the
	// engine has shared memory disabled, so peers still use TCP.
	buf, err := allocBuffer(e, o.bufferSize, true)
	if err != nil {
		return err
	}
	defer buf.free(e)
	if _, err := fmt.Fprintf(stdout, "TARGET segment=%s addr=%#x size=%d protocol=%s\n", e.Name(), buf.addr, buf.size, o.protocol); err != nil {
		return err
	}
	slog.Info("transfer_engine_bench target serving; stop with SIGINT or SIGTERM",
		"segment", e.Name(), "metadata_server", o.metadataServer, "protocol", o.protocol, "buffer_size", buf.size)
	sig := <-stop
	slog.Info("transfer_engine_bench target stopping", "signal", fmt.Sprint(sig))
	return nil
}
