package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mooncake-go/mooncake/cmd/mooncake/doctor"
	"github.com/mooncake-go/mooncake/internal/version"
)

const doctorUsage = `usage:
  mooncake doctor [--master host:port|etcd://h:2379] [--metadata URL] [--json] [flags]
        check a live deployment; exit 1 when a check fails
  mooncake doctor logs [--json] FILE...   ("-" reads stdin)
        find the known error strings in logs and say their cause and fix
  mooncake doctor error [--json] CODE     (a number such as -200, or a name)
        explain a store or engine error number

The checks are listed in docs/doctor.md.

flags of mooncake doctor:
`

// doctorReport is the --json output of mooncake doctor (its schema is in
// docs/doctor.md).
type doctorReport struct {
	Version string                `json:"version"`
	Checks  []doctor.Result       `json:"checks"`
	Summary map[doctor.Status]int `json:"summary"`
}

func doctorCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "logs":
			return doctorLogs(args[1:], stdout, stderr)
		case "error":
			return doctorError(args[1:], stdout, stderr)
		}
	}
	cfg := doctor.DefaultConfig()
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doctorUsage); fs.PrintDefaults() }
	fs.StringVar(&cfg.Master, "master", cfg.Master, `master RPC address, or "etcd://h1:2379;h2:2379" for the elected leader; "" skips the master checks`)
	fs.IntVar(&cfg.MetricsPort, "metrics_port", cfg.MetricsPort, "the master's admin HTTP port (mooncake_master --metrics_port)")
	fs.StringVar(&cfg.Metadata, "metadata", cfg.Metadata, `metadata server ("http://h:8080/metadata", "etcd://h:2379", "P2PHANDSHAKE"); default $MC_METADATA_SERVER`)
	fs.IntVar(&cfg.RPCPort, "rpc_port", cfg.RPCPort, "RPC port a mooncake_master on this host binds; 0 skips")
	fs.IntVar(&cfg.HTTPMetadataPort, "http_metadata_server_port", cfg.HTTPMetadataPort, "HTTP metadata port a mooncake_master on this host binds; 0 skips")
	fs.Var(sizeFlag{&cfg.GlobalSegmentSize}, "global_segment_size", "bytes a store client on this host contributes (setup's global_segment_size; 4GB, 512MiB or a number)")
	fs.Var(sizeFlag{&cfg.LocalBufferSize}, "local_buffer_size", "bytes a store client on this host stages through (setup's local_buffer_size)")
	fs.StringVar(&cfg.ShmPath, "shm_path", cfg.ShmPath, "shared-memory file system to check")
	fs.StringVar(&cfg.InfinibandPath, "infiniband_path", cfg.InfinibandPath, "sysfs directory of RDMA devices")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "deadline of each network check")
	asJSON := fs.Bool("json", false, "print the results as JSON (schema in docs/doctor.md)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mooncake doctor: unexpected arguments %q\n\n", fs.Args())
		fs.Usage()
		return 2
	}
	if cfg.Timeout <= 0 {
		fmt.Fprintln(stderr, "mooncake doctor: --timeout must be positive")
		return 2
	}
	results := doctor.Run(context.Background(), cfg)
	counts := doctor.Counts(results)
	if *asJSON {
		writeJSON(stdout, doctorReport{Version: version.String(), Checks: results, Summary: counts})
	} else {
		for _, r := range results {
			fmt.Fprintf(stdout, "%-9s %-18s %s\n", statusLabel(r.Status), r.Check, r.Message)
			if r.Fix != "" {
				fmt.Fprintf(stdout, "%-28s fix: %s\n", "", r.Fix)
			}
		}
		fmt.Fprintf(stdout, "\nmooncake doctor %s: %d ok, %d warning, %d failure, %d skipped\n", version.String(),
			counts[doctor.OK], counts[doctor.Warning], counts[doctor.Failure], counts[doctor.Skipped])
	}
	if counts[doctor.Failure] > 0 {
		return 1
	}
	return 0
}

func statusLabel(s doctor.Status) string {
	if s == doctor.Failure {
		return "[FAILURE]"
	}
	return "[" + string(s) + "]"
}

// doctorLogs scans log files; exit 1 when it finds known problems.
func doctorLogs(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor logs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doctorUsage); fs.PrintDefaults() }
	asJSON := fs.Bool("json", false, "print the findings as JSON")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, "mooncake doctor logs: name at least one FILE (\"-\" for stdin)\n\n", doctorUsage)
		return 2
	}
	findings := []doctor.LogFinding{}
	for _, name := range fs.Args() {
		var r io.Reader = os.Stdin
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				fmt.Fprintln(stderr, "mooncake doctor logs:", err)
				return 2
			}
			defer f.Close()
			r = f
		}
		got, err := doctor.ScanLog(name, r)
		if err != nil {
			fmt.Fprintf(stderr, "mooncake doctor logs: %s: %v\n", name, err)
			return 2
		}
		findings = append(findings, got...)
	}
	if *asJSON {
		writeJSON(stdout, map[string]any{"findings": findings})
	} else {
		for _, f := range findings {
			fmt.Fprintf(stdout, "%s:%d: %s\n  problem: %s\n  cause:   %s\n  fix:     %s\n", f.File, f.Line, f.Text, f.Problem, f.Cause, f.Fix)
		}
		fmt.Fprintf(stdout, "%d known problems found\n", len(findings))
	}
	if len(findings) > 0 {
		return 1
	}
	return 0
}

// doctorError explains an error number or name.
func doctorError(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor error", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, doctorUsage); fs.PrintDefaults() }
	asJSON := fs.Bool("json", false, "print the explanation as JSON")
	// A negative number is an argument, not a flag.
	var codes []string
	for len(args) > 0 && strings.HasPrefix(args[len(args)-1], "-") && len(args[len(args)-1]) > 1 && isDigits(args[len(args)-1][1:]) {
		codes = append([]string{args[len(args)-1]}, codes...)
		args = args[:len(args)-1]
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	codes = append(fs.Args(), codes...)
	if len(codes) != 1 {
		fmt.Fprint(stderr, "mooncake doctor error: one CODE expected (e.g. -200 or NO_AVAILABLE_HANDLE)\n\n", doctorUsage)
		return 2
	}
	infos := doctor.ExplainCode(codes[0])
	if len(infos) == 0 {
		fmt.Fprintf(stderr, "mooncake doctor error: %s is not an error number or name of Mooncake-Go's store or engine (list: docs/doctor.md)\n", codes[0])
		return 1
	}
	if *asJSON {
		writeJSON(stdout, infos)
		return 0
	}
	for _, c := range infos {
		fmt.Fprintf(stdout, "%s error %d %s (logged as %q)\n  meaning: %s\n  fix:     %s\n", c.Component, c.Code, c.Name, c.LogText, c.Meaning, c.Fix)
	}
	return 0
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
