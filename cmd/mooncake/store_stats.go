package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mooncake-go/mooncake/kvstore/client"
)

const storeUsage = `usage: mooncake store stats --breakdown --server host:port [--json]

Summarise a store client's span breakdown: the /breakdown endpoint of the
metrics server it started (start_metrics_server), per API call and phase:
spans, failures, mean and max time, bytes; then its runtime and segments.
--json prints the endpoint's JSON as it is.
`

func storeCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, storeUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] != "stats" {
		fmt.Fprintf(stderr, "mooncake store: unknown command %q\n\n%s", args[0], storeUsage)
		return 2
	}
	fs := flag.NewFlagSet("store stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, storeUsage); fs.PrintDefaults() }
	breakdown := fs.Bool("breakdown", false, "summarise the client's /breakdown (required: the only statistics there are)")
	server := fs.String("server", "", "the client's metrics server, host:port")
	asJSON := fs.Bool("json", false, "print the /breakdown JSON unchanged")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the request")
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "mooncake store stats: unexpected argument %q\n", fs.Arg(0))
		return 2
	case !*breakdown:
		fmt.Fprintln(stderr, "mooncake store stats: --breakdown is required")
		return 2
	case *server == "":
		fmt.Fprintln(stderr, "mooncake store stats: --server host:port is required")
		return 2
	}
	body, err := fetchBreakdown(*server, *timeout)
	if err != nil {
		fmt.Fprintln(stderr, "mooncake store stats:", err)
		return 1
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		return 0
	}
	var b client.Breakdown
	if err := json.Unmarshal(body, &b); err != nil {
		fmt.Fprintf(stderr, "mooncake store stats: %s/breakdown is not a breakdown: %v\n", *server, err)
		return 1
	}
	printBreakdown(stdout, b)
	return 0
}

func fetchBreakdown(server string, timeout time.Duration) ([]byte, error) {
	url := server
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	hc := &http.Client{Timeout: timeout}
	resp, err := hc.Get(strings.TrimRight(url, "/") + "/breakdown")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/breakdown: %s", server, resp.Status)
	}
	return body, nil
}

func printBreakdown(w io.Writer, b client.Breakdown) {
	r := b.Runtime
	fmt.Fprintf(w, "runtime %s  host %s  pid %d  up %.0fs  namespace %q\n", r.ID, r.Host, r.PID, r.UptimeS, r.Namespace)
	table := func(title string, stats map[string]client.Stat) {
		fmt.Fprintf(w, "\n%s\n", title)
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "name\tcalls\tfailed\tmean_us\tmax_us\tbytes\t")
		names := make([]string, 0, len(stats))
		for n := range stats {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			s := stats[n]
			mean := uint64(0)
			if s.Count > 0 {
				mean = s.TotalUs / s.Count
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", n, s.Count, s.Errors, mean, s.MaxUs, s.Bytes)
		}
		tw.Flush()
	}
	table("API calls", b.APIs)
	table("phases (master.* metadata RPCs, transfer.* data moves, task.* replica moves)", b.Phases)
	fmt.Fprintln(w, "\nsegments")
	for _, s := range b.Segments {
		fmt.Fprintf(w, "  %s  %d bytes  %s\n", s.ID, s.Size, s.Mode)
	}
	t := b.Tracing
	fmt.Fprintf(w, "\ntracing: text=%v text_file=%q jsonl_file=%q key_mode=%s\n", t.Text, t.TextFile, t.JSONLFile, t.KeyMode)
}
