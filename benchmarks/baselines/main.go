// Command baselines measures what the machine gives without the Transfer
// Engine, for benchmarks/te_bench.py to print beside the engine's figures:
//
//	baselines memcpy --block_size N --duration S [--threads T] [--footprint B]
//	baselines socket --block_size N --duration S --streams K [--footprint B] [--in_process]
//	baselines socket --listen HOST:PORT ...   (the sender: socket-send, run elsewhere)
//	baselines socket-send --addr HOST:PORT --block_size N --duration S --streams K [--footprint B]
//	baselines rtt-serve --listen HOST:PORT --block_size N
//	baselines rtt --addr HOST:PORT --block_size N --duration S
//
// memcpy copies block_size pieces between two buffers of footprint bytes
// with Go's copy (the same memmove the engine's shm transport uses), on T
// goroutines. socket streams block_size writes over K loopback TCP
// connections from a child process into a footprint-sized receive buffer,
// with no per-block acknowledgement: the raw throughput a TCP transport
// between two processes could reach. With --listen it binds that address
// instead, says so on stderr ("listening HOST:PORT") and receives from a
// socket-send started on another host (a network namespace of the cluster
// rig, for one): the raw throughput between two hosts. rtt sends
// block_size bytes over one TCP connection to an rtt-serve, which sends
// them back, one round trip at a time: the least time a request carrying
// block_size bytes, answered with as many, can take between two hosts.
// Each measurement prints one JSON line on stdout.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// result is one measurement, printed as a JSON line.
type result struct {
	Kind      string  `json:"kind"` // memcpy or socket
	BlockSize int     `json:"block_size"`
	Threads   int     `json:"threads,omitempty"`
	Streams   int     `json:"streams,omitempty"`
	Footprint int     `json:"footprint"`
	Seconds   float64 `json:"duration_s"`
	Bytes     uint64  `json:"bytes"`
	GBps      float64 `json:"gb_per_s"`
	GiBps     float64 `json:"gib_per_s"`
	RoundTrip int     `json:"round_trips,omitempty"` // rtt: round trips made
	P50us     float64 `json:"p50_us,omitempty"`      // rtt: median round trip
	P99us     float64 `json:"p99_us,omitempty"`
}

func (r *result) finish(bytes uint64, elapsed time.Duration) {
	r.Bytes, r.Seconds = bytes, elapsed.Seconds()
	if r.Seconds > 0 {
		r.GBps = float64(bytes) / r.Seconds / 1e9
		r.GiBps = float64(bytes) / r.Seconds / (1 << 30)
	}
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "baselines:", err)
		os.Exit(2)
	}
}

const usage = `Usage:
  baselines memcpy --block_size N --duration S [--threads T] [--footprint B]
  baselines socket --block_size N --duration S --streams K [--footprint B] [--in_process]
  baselines socket --listen HOST:PORT --block_size N --duration S --streams K [--footprint B]
  baselines socket-send --addr HOST:PORT --block_size N --duration S --streams K [--footprint B]
  baselines rtt-serve --listen HOST:PORT --block_size N
  baselines rtt --addr HOST:PORT --block_size N --duration S
`

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing subcommand")
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	cmd := args[0]
	fs := flag.NewFlagSet("baselines "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	block := fs.Int("block_size", 65536, "bytes per copy or per socket write")
	durationS := fs.Float64("duration", 3, "seconds to measure")
	footprint := fs.Int("footprint", 64<<20, "bytes of source and of destination memory cycled through")
	threads := fs.Int("threads", 1, "memcpy: goroutines copying")
	streams := fs.Int("streams", 4, "socket: TCP connections")
	inProcess := fs.Bool("in_process", false, "socket: send from a goroutine of this process, not a child process")
	addr := fs.String("addr", "", "socket-send, rtt: the address of the socket --listen or rtt-serve to dial")
	listen := fs.String("listen", "", "socket: receive from a socket-send run elsewhere, on this address; rtt-serve: serve here")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *block <= 0 || *durationS <= 0 || *threads <= 0 || *streams <= 0 {
		return errors.New("--block_size, --duration, --threads and --streams must be positive")
	}
	d := time.Duration(*durationS * float64(time.Second))
	var r result
	var err error
	switch cmd {
	case "memcpy":
		r, err = measureMemcpy(*block, *threads, max(*footprint, *block**threads), d)
	case "socket":
		r, err = measureSocket(*block, *streams, max(*footprint, *block**streams), d, *inProcess,
			*listen, stderr)
	case senderSub:
		return runSender(*addr, *block, *streams, max(*footprint, *block**streams), d)
	case "rtt-serve":
		return serveRoundTrips(*listen, *block, stderr)
	case "rtt":
		r, err = measureRoundTrips(*addr, *block, d)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown subcommand %q", cmd)
	}
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

// newTouched allocates n bytes and writes every page, so page faults stay
// out of the measurement.
func newTouched(n int, seed byte) []byte {
	var pat [1 << 16]byte
	for i := range pat {
		pat[i] = byte(i*131) ^ seed
	}
	b := make([]byte, n)
	for off := 0; off < n; off += len(pat) {
		copy(b[off:], pat[:])
	}
	return b
}
