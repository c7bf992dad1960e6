package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"runtime"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/transfer"
	"github.com/mooncake-go/mooncake/transfer/metadata"
)

// options are the parsed and validated command-line flags.
type options struct {
	mode            string // "target" or "initiator"
	metadataServer  string
	localServerName string
	segmentID       string // initiator: the target's segment name
	operation       string // "read" or "write"
	protocol        string // "shm" or "tcp"
	blockSize       uint64
	batchSize       int
	threads         int
	duration        time.Duration
	bufferSize      uint64
	warmupBatches   int
	report          string // "text" or "json"
	cpuProfile      string
}

// opcode is the transfer direction the options ask for.
func (o *options) opcode() transfer.Opcode {
	if o.operation == "write" {
		return transfer.OpWrite
	}
	return transfer.OpRead
}

// footprint is the number of bytes one round of batches touches on each
// side: threads × batch_size blocks, laid out as upstream's bench does.
func (o *options) footprint() uint64 {
	return o.blockSize * uint64(o.batchSize) * uint64(o.threads)
}

// defaultThreads is upstream's 12, capped at twice the CPUs so a small
// machine is not drowned in submitters.
func defaultThreads() int { return min(12, runtime.NumCPU()*2) }

const usageHead = `Usage:
  %[1]s --mode target    [--protocol shm|tcp] [--buffer_size N] ...
  %[1]s --mode initiator --segment_id NAME [--operation read|write] [--protocol shm|tcp] ...

Measures Transfer Engine throughput between a target, which allocates and
registers a buffer and serves until SIGINT/SIGTERM, and an initiator, which
runs --threads goroutines each submitting batches of --batch_size requests of
--block_size bytes for --duration seconds.

The target prints one line on stdout that scripts can parse:
  TARGET segment=127.0.0.1:15321 addr=0x7f0000000000 size=1073741824 protocol=shm
Pass its segment= value to the initiator's --segment_id.

Flags:
`

// parseOptions parses and validates args. Errors have been printed to out.
func parseOptions(args []string, out io.Writer) (*options, error) {
	fs := flag.NewFlagSet("transfer_engine_bench", flag.ContinueOnError)
	fs.SetOutput(out)
	o := &options{}
	fs.StringVar(&o.mode, "mode", "initiator", "role of this process: target or initiator")
	fs.StringVar(&o.metadataServer, "metadata_server", transfer.P2PHandshake,
		"metadata service: P2PHANDSHAKE, http://host:port/metadata or etcd://host:port")
	fs.StringVar(&o.localServerName, "local_server_name", "127.0.0.1",
		"local host (P2PHANDSHAKE: the segment becomes host:rpc_port) or segment name")
	fs.StringVar(&o.segmentID, "segment_id", "", "initiator: segment name of the target (from its TARGET line)")
	fs.StringVar(&o.operation, "operation", "read", "initiator: read or write")
	fs.StringVar(&o.protocol, "protocol", "shm",
		"shm: managed buffers on both sides, shared memory allowed for same-host peers; tcp: force the TCP transport")
	blockSize := fs.Uint64("block_size", 65536, "bytes per request")
	fs.IntVar(&o.batchSize, "batch_size", 128, "requests per batch")
	fs.IntVar(&o.threads, "threads", defaultThreads(), "initiator: concurrent submitting goroutines")
	durationS := fs.Float64("duration", 10, "initiator: seconds to run (fractions allowed)")
	bufferSize := fs.Uint64("buffer_size", 1<<30, "bytes of registered buffer on each side")
	fs.IntVar(&o.warmupBatches, "warmup_batches", 0,
		"initiator: untimed batches per thread before measuring (0, as upstream: first touches of the\n"+
			"target's memory, page faults and connection set-up count against the result)")
	fs.StringVar(&o.report, "report", "text", "result format on stdout: text or json (one line)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) to this file")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), usageHead, fs.Name())
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	o.blockSize, o.bufferSize = *blockSize, *bufferSize
	err := o.validate(fs.Args(), *durationS)
	if err != nil {
		fmt.Fprintf(out, "transfer_engine_bench: %v\nRun with --help for usage.\n", err)
		return nil, cli.UsageError{Err: err}
	}
	return o, nil
}

// validate checks the flags together and fills derived fields.
func (o *options) validate(rest []string, durationS float64) error {
	if len(rest) > 0 {
		return fmt.Errorf("unexpected arguments %q", rest)
	}
	o.mode, o.operation = strings.ToLower(o.mode), strings.ToLower(o.operation)
	o.protocol, o.report = strings.ToLower(o.protocol), strings.ToLower(o.report)
	switch o.mode {
	case "target", "initiator":
	default:
		return fmt.Errorf("--mode %q: want target or initiator", o.mode)
	}
	switch o.operation {
	case "read", "write":
	default:
		return fmt.Errorf("--operation %q: want read or write", o.operation)
	}
	switch o.protocol {
	case "shm", "tcp":
	case "rdma":
		return errors.New("--protocol rdma is not available in this build; use shm or tcp")
	default:
		return fmt.Errorf("--protocol %q: want shm or tcp", o.protocol)
	}
	switch o.report {
	case "text", "json":
	default:
		return fmt.Errorf("--report %q: want text or json", o.report)
	}
	if o.localServerName == "" {
		return errors.New("--local_server_name must not be empty")
	}
	conn, err := metadata.ParseConn(o.metadataServer)
	if err != nil {
		return fmt.Errorf("--metadata_server %q: %v", o.metadataServer, err)
	}
	if o.bufferSize == 0 {
		return errors.New("--buffer_size must be positive")
	}
	if o.mode == "target" {
		return nil
	}
	if o.segmentID == "" {
		return errors.New("--segment_id is required in initiator mode (the target prints it as segment=...)")
	}
	if conn.Kind != "p2p" && o.segmentID == o.localServerName {
		return fmt.Errorf("--segment_id and --local_server_name are both %q; with a metadata server every process needs its own name", o.segmentID)
	}
	if o.blockSize == 0 {
		return errors.New("--block_size must be positive")
	}
	if o.batchSize <= 0 {
		return fmt.Errorf("--batch_size %d: must be positive", o.batchSize)
	}
	if o.threads <= 0 {
		return fmt.Errorf("--threads %d: must be positive", o.threads)
	}
	if o.warmupBatches < 0 {
		return fmt.Errorf("--warmup_batches %d: must not be negative", o.warmupBatches)
	}
	if math.IsNaN(durationS) || durationS <= 0 || durationS > 1e6 {
		return fmt.Errorf("--duration %v: want a positive number of seconds", durationS)
	}
	o.duration = time.Duration(durationS * float64(time.Second))
	hi, lo := mul3(o.blockSize, uint64(o.batchSize), uint64(o.threads))
	if hi != 0 || lo > o.bufferSize {
		return fmt.Errorf("block_size*batch_size*threads = %d*%d*%d bytes does not fit --buffer_size %d; "+
			"lower one of them or raise --buffer_size", o.blockSize, o.batchSize, o.threads, o.bufferSize)
	}
	return nil
}

// mul3 returns a*b*c as a 128-bit (hi, lo) pair, so overflow is visible.
func mul3(a, b, c uint64) (hi, lo uint64) {
	h1, l1 := bits.Mul64(a, b)
	if h1 != 0 {
		return 1, 0
	}
	return bits.Mul64(l1, c)
}
