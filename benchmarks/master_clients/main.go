// Command master_clients measures one store master as its client count
// grows (issue 49's "many clients"): storage clients that mounted a
// segment and pure clients, each with a connection of its own, heartbeating
// as the store client does (a Ping a second), while a probe client puts,
// reads and checks objects.
//
//	master_clients --master PATH [--rows 1+9,10+90,100+900,1000+10000]
//	               [--duration 10s] [--probe_rate 200] [--csv FILE]
//	master_clients --master PATH --failover [--lease 2] [--etcd PATH] [--rows ...]
//
// Each row "S+P" starts a fresh master (loopback, free ports), dials S
// storage clients that mount a 64 MiB segment each and P pure clients, and
// runs three phases of --duration:
//
//   - no client: the master's CPU time (utime+stime from /proc) at rest;
//   - heartbeats only: the master's CPU time over the phase, less its CPU
//     at rest, divided by the pings it answered is its CPU per heartbeat;
//   - heartbeats and the probe: 4 KiB PutStart+PutEnd, GetReplicaList and
//     ExistKey at --probe_rate rounds/s, with their p50/p99 and the
//     pings' p50/p99.
//
// It prints one line per row, with the load average, and appends the rows
// to --csv. With --failover each row instead runs two masters with
// --enable_ha on an etcd of its own, kills the leader with SIGKILL once
// every client heartbeats, and reports the time from the kill to the
// probe's first successful put and to each client's first heartbeat the
// new leader answers (failover.go). The clients speak the master's framed RPC (internal/framedrpc),
// as the store clients do; no data moves (the master never reads segment
// memory), so the figures are the master's alone. The load generator runs
// on the same host and competes with the master for its CPUs: compare rows
// of one run.
package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// segmentSize is each storage client's segment.
const segmentSize = 64 << 20

// objectSize is the probe's object.
const objectSize = 4 << 10

// heartbeat is how often each client pings, as the store client does.
const heartbeat = time.Second

func main() {
	masterBin := flag.String("master", "", "the mooncake_master binary (required)")
	rowsFlag := flag.String("rows", "1+9,10+90,100+900,1000+10000", "client counts to measure: storage+pure per row, comma-separated")
	duration := flag.Duration("duration", 10*time.Second, "length of each of a row's three phases")
	probeRate := flag.Int("probe_rate", 200, "probe rounds (put, get, exist) per second in the last phase")
	csvPath := flag.String("csv", "", "append the rows to this CSV file")
	failover := flag.Bool("failover", false, "measure a leader failover per row instead (two HA masters on an etcd of their own)")
	lease := flag.Int("lease", 2, "with --failover: the masters' --master_view_lease_ttl_sec")
	etcdBin := flag.String("etcd", "etcd", "with --failover: the etcd binary")
	flag.Parse()
	if *masterBin == "" {
		fail(errors.New("--master is required (a mooncake_master binary)"))
	}
	rows, err := parseRows(*rowsFlag)
	if err != nil {
		fail(err)
	}
	if *probeRate <= 0 || *duration <= 0 {
		fail(errors.New("--probe_rate and --duration must be positive"))
	}
	if *failover {
		if *lease < 1 {
			fail(errors.New("--lease must be at least 1 (seconds)"))
		}
		if *etcdBin, err = exec.LookPath(*etcdBin); err != nil {
			fail(fmt.Errorf("--etcd: %w", err))
		}
	}
	var out *csv.Writer
	if *csvPath != "" {
		f, err := os.OpenFile(*csvPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		out = csv.NewWriter(f)
		if st, _ := f.Stat(); st.Size() == 0 {
			out.Write(map[bool][]string{false: resultFields, true: failoverFields}[*failover])
		}
	}
	if *failover {
		fmt.Printf("leader killed with SIGKILL; lease %d s; times in ms from the kill\n", *lease)
		fmt.Println("storage+pure  first put (ms)  clients back p50/p99/max  not back  load")
		for _, r := range rows {
			res, err := measureFailover(*masterBin, *etcdBin, r, *lease)
			if err != nil {
				fail(fmt.Errorf("row %d+%d: %w", r.storage, r.pure, err))
			}
			fmt.Println(res)
			if out != nil {
				out.Write(res.record(*lease))
				out.Flush()
			}
		}
		return
	}
	fmt.Println("storage+pure  cpu_us/heartbeat  master_cpu_%  pings/s  ping p50/p99 us  put p50/p99 us  get p50/p99 us  exist p50/p99 us  rss_MiB  load")
	for _, r := range rows {
		res, err := measure(*masterBin, r, *duration, *probeRate)
		if err != nil {
			fail(fmt.Errorf("row %d+%d: %w", r.storage, r.pure, err))
		}
		fmt.Println(res)
		if out != nil {
			out.Write(res.record())
			out.Flush()
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "master_clients:", err)
	os.Exit(1)
}

// row is one client population.
type row struct{ storage, pure int }

func parseRows(s string) ([]row, error) {
	var rows []row
	for _, f := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), "+")
		st, err1 := strconv.Atoi(a)
		pu, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || st < 1 || pu < 0 {
			return nil, fmt.Errorf("--rows: %q is not STORAGE+PURE with STORAGE >= 1", f)
		}
		rows = append(rows, row{st, pu})
	}
	return rows, nil
}

// result is one row's figures.
type result struct {
	row
	cpuPerBeatUs, cpuPercent, pingsPerS float64
	ping, put, get, exist               percentiles
	rssMiB                              float64
	load                                string
}

var resultFields = []string{"storage", "pure", "cpu_us_per_heartbeat", "master_cpu_percent", "pings_per_s",
	"ping_p50_us", "ping_p99_us", "put_p50_us", "put_p99_us", "get_p50_us", "get_p99_us",
	"exist_p50_us", "exist_p99_us", "rss_mib", "load"}

func (r result) String() string {
	return fmt.Sprintf("%5d+%-6d  %16.1f  %12.1f  %7.0f  %15s  %14s  %14s  %16s  %7.0f  %s",
		r.storage, r.pure, r.cpuPerBeatUs, r.cpuPercent, r.pingsPerS, r.ping, r.put, r.get, r.exist, r.rssMiB, r.load)
}

func (r result) record() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	return []string{strconv.Itoa(r.storage), strconv.Itoa(r.pure), f(r.cpuPerBeatUs), f(r.cpuPercent), f(r.pingsPerS),
		f(r.ping.p50), f(r.ping.p99), f(r.put.p50), f(r.put.p99), f(r.get.p50), f(r.get.p99),
		f(r.exist.p50), f(r.exist.p99), f(r.rssMiB), r.load}
}

// percentiles are a latency sample's p50 and p99 in microseconds.
type percentiles struct{ p50, p99 float64 }

func (p percentiles) String() string { return fmt.Sprintf("%.0f/%.0f", p.p50, p.p99) }

func percentilesOf(d []time.Duration) percentiles {
	if len(d) == 0 {
		return percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))]) / 1e3 }
	return percentiles{at(0.50), at(0.99)}
}

// measure runs one row against a fresh master.
func measure(bin string, r row, duration time.Duration, probeRate int) (result, error) {
	m, err := startMaster(bin)
	if err != nil {
		return result{}, err
	}
	defer m.stop()
	idle, err := m.cpuRate(duration)
	if err != nil {
		return result{}, err
	}

	clients, err := dialClients(m.addr, r)
	defer closeClients(clients)
	if err != nil {
		return result{}, err
	}

	ctx, cancel := context.WithCancel(context.Background())
	beats := startHeartbeats(ctx, clients, nil)
	defer func() { cancel(); beats.wait() }()
	time.Sleep(heartbeat) // every client is on its schedule

	// Phase 1: heartbeats only.
	cpu0, err := m.cpuTime()
	if err != nil {
		return result{}, err
	}
	pings0, start := beats.count.Load(), time.Now()
	time.Sleep(duration)
	cpu1, err := m.cpuTime()
	if err != nil {
		return result{}, err
	}
	pings, elapsed := beats.count.Load()-pings0, time.Since(start)
	if pings == 0 {
		return result{}, errors.New("no ping was answered")
	}
	busy := float64(cpu1-cpu0) - idle*float64(elapsed)
	res := result{row: r, cpuPerBeatUs: busy / 1e3 / float64(pings),
		cpuPercent: 100 * float64(cpu1-cpu0) / float64(elapsed), pingsPerS: float64(pings) / elapsed.Seconds()}

	// Phase 2: heartbeats and the probe.
	beats.resetLatencies()
	probe, err := dialClient(m.addr)
	if err != nil {
		return result{}, fmt.Errorf("probe: %w", err)
	}
	defer probe.close()
	put, get, exist, err := probe.probe(duration, probeRate)
	if err != nil {
		return result{}, fmt.Errorf("probe: %w", err)
	}
	if f := beats.failures.Load(); f > 0 {
		return result{}, fmt.Errorf("%d pings failed: %v", f, beats.firstError())
	}
	res.ping, res.put, res.get, res.exist = percentilesOf(beats.latencies()), percentilesOf(put), percentilesOf(get), percentilesOf(exist)
	if res.rssMiB, err = m.rssMiB(); err != nil {
		return result{}, err
	}
	res.load = loadAverage()
	return res, nil
}

// dialClients dials r's clients to the master at addr: the storage ones
// mount their segment, the pure ones ping once. It returns those it
// dialled, also on error.
func dialClients(addr string, r row) ([]*client, error) {
	clients := make([]*client, 0, r.storage+r.pure)
	for i := range r.storage + r.pure {
		c, err := dialClient(addr)
		if err != nil {
			return clients, fmt.Errorf("client %d: %w", i, err)
		}
		clients = append(clients, c)
		if i < r.storage {
			err = c.mount(i)
		} else {
			_, err = c.ping()
		}
		if err != nil {
			return clients, fmt.Errorf("client %d: %w", i, err)
		}
		if (i+1)%1000 == 0 {
			fmt.Fprintf(os.Stderr, "  %d of %d clients dialled\n", i+1, r.storage+r.pure)
		}
	}
	return clients, nil
}

func closeClients(clients []*client) {
	for _, c := range clients {
		c.close()
	}
}
