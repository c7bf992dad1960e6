// Command mooncake is Mooncake-Go's diagnostics tool.
//
//	mooncake info                      host topology, GPUs and CUDA, as JSON
//	mooncake probe --metadata_server=S SEGMENT
//	                                   is a Transfer Engine segment reachable?
//	mooncake doctor [--master A] [--metadata URL] [--json]
//	                                   check a live deployment (docs/doctor.md)
//	mooncake doctor logs FILE...       known problems in logs, with fixes
//	mooncake doctor error CODE         explain a store or engine error number
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/gpu/discovery"
	"github.com/mooncake-go/mooncake/internal/logging"
	"github.com/mooncake-go/mooncake/transfer"
)

const usage = `usage: mooncake COMMAND [flags]

commands:
  info    print the host's topology, GPUs and CUDA driver as JSON
  probe   check that a Transfer Engine segment answers
          mooncake probe [--metadata_server=P2PHANDSHAKE] [--local_hostname=127.0.0.1] SEGMENT
  doctor  check a live deployment and say what is wrong and how to fix it
          mooncake doctor [--master host:port] [--metadata URL] [--json]
          mooncake doctor logs FILE...    mooncake doctor error CODE
          (mooncake doctor --help lists every flag)
`

func main() {
	logging.Setup()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "info":
		return info(stdout, stderr)
	case "probe":
		return probe(args[1:], stdout, stderr)
	case "doctor":
		return doctorCmd(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "mooncake: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// info prints the host's topology, its GPUs (NVML) and whether the CUDA
// driver that device-memory transfers use loads. No GPU is not an error:
// "gpus" is then empty and "gpu_note" says why.
func info(stdout, stderr io.Writer) int {
	out := map[string]any{"topology": json.RawMessage(transfer.LocalTopology())}
	inv, err := discovery.Discover()
	switch {
	case errors.Is(err, discovery.ErrNoDriver):
		out["gpus"] = []discovery.Device{}
		out["gpu_note"] = "no GPU: " + err.Error()
	case err != nil:
		fmt.Fprintln(stderr, "mooncake:", err)
		return 1
	default:
		out["gpus"], out["driver_version"] = inv.Devices, inv.DriverVersion
	}
	cuda := map[string]any{"device_memory": "staged through pinned host memory"}
	if _, err := gpu.OpenCUDA(); err != nil {
		cuda["device_memory"] = "none: every pointer is host memory"
		cuda["note"] = err.Error()
	}
	out["cuda"] = cuda
	writeJSON(stdout, out)
	return 0
}

func probe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	meta := fs.String("metadata_server", transfer.P2PHandshake, "metadata server of the segment")
	host := fs.String("local_hostname", "127.0.0.1", "host this probe runs as")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, "mooncake probe: one SEGMENT name expected\n\n", usage)
		return 2
	}
	e, err := transfer.New(transfer.Config{LocalHostname: *host, MetadataServer: *meta})
	if err != nil {
		fmt.Fprintln(stderr, "mooncake probe:", err)
		return 1
	}
	defer e.Close()
	if err := e.Probe(fs.Arg(0)); err != nil {
		fmt.Fprintln(stderr, "mooncake probe:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: reachable\n", fs.Arg(0))
	return 0
}
