// Command master_clients measures one store master as its client count
// grows (issue 49's "many clients"): storage clients that mounted a
// segment and pure clients, each with a connection of its own, heartbeating
// as the store client does (a Ping a second), while a probe client puts,
// reads and checks objects.
//
//	master_clients --master PATH [--rows 1+9,10+90,100+900,1000+10000]
//	               [--duration 10s] [--probe_rate 200] [--csv FILE]
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
// to --csv. The clients speak the master's framed RPC (internal/framedrpc),
// as the store clients do; no data moves (the master never reads segment
// memory), so the figures are the master's alone. The load generator runs
// on the same host and competes with the master for its CPUs: compare rows
// of one run.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/internal/pollread"
	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
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
	var out *csv.Writer
	if *csvPath != "" {
		f, err := os.OpenFile(*csvPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		out = csv.NewWriter(f)
		if st, _ := f.Stat(); st.Size() == 0 {
			out.Write(resultFields)
		}
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
	ping, put, get, exist                percentiles
	rssMiB                               float64
	load                                 string
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

	clients := make([]*client, 0, r.storage+r.pure)
	defer func() {
		for _, c := range clients {
			c.conn.Close()
		}
	}()
	for i := range r.storage + r.pure {
		c, err := dialClient(m.addr)
		if err != nil {
			return result{}, fmt.Errorf("client %d: %w", i, err)
		}
		clients = append(clients, c)
		if i < r.storage {
			if err := c.mount(i); err != nil {
				return result{}, fmt.Errorf("client %d: mount: %w", i, err)
			}
		} else if err := c.ping(); err != nil {
			return result{}, fmt.Errorf("client %d: ping: %w", i, err)
		}
		if (i+1)%1000 == 0 {
			fmt.Fprintf(os.Stderr, "  %d of %d clients dialled\n", i+1, r.storage+r.pure)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	beats := startHeartbeats(ctx, clients)
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
	defer probe.conn.Close()
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

// master is one mooncake_master process.
type master struct {
	cmd  *exec.Cmd
	addr string
	dir  string
}

func startMaster(bin string) (*master, error) {
	dir, err := os.MkdirTemp("", "master_clients")
	if err != nil {
		return nil, err
	}
	rpc, err := freePort()
	if err != nil {
		return nil, err
	}
	metrics, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "master.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, "--rpc_address=127.0.0.1", fmt.Sprintf("--rpc_port=%d", rpc),
		fmt.Sprintf("--metrics_port=%d", metrics))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &master{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", rpc), dir: dir}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", m.addr, time.Second); err == nil {
			c.Close()
			return m, nil
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("the master did not listen on %s within 20 s (log: %s)", m.addr, log.Name())
		}
	}
}

func (m *master) stop() {
	m.cmd.Process.Kill()
	m.cmd.Wait()
	os.RemoveAll(m.dir)
}

// cpuTime is the master's user+system CPU time so far, in nanoseconds.
func (m *master) cpuTime() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis; utime and
	// stime are the 14th and 15th of the line.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", m.cmd.Process.Pid, b)
	}
	const ticks = 100 // USER_HZ on Linux
	return (ut + st) * int64(time.Second) / ticks, nil
}

// cpuRate is the master's CPU time per second of wall time over d.
func (m *master) cpuRate(d time.Duration) (float64, error) {
	cpu0, err := m.cpuTime()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d)
	cpu1, err := m.cpuTime()
	return float64(cpu1-cpu0) / float64(time.Since(start)), err
}

// rssMiB is the master's resident set size.
func (m *master) rssMiB() (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// client is one simulated store client with a connection of its own.
type client struct {
	id          string
	incarnation uint64
	conn        *framedrpc.Client
	rpc         pb.MasterClient
}

// callTimeout bounds every call of the load generator.
const callTimeout = 10 * time.Second

func dialClient(addr string) (*client, error) {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	id, secret := hex.EncodeToString(raw[:8]), hex.EncodeToString(raw[8:])
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	conn, err := framedrpc.Dial(ctx, addr, framedrpc.Options{
		Metadata: map[string]string{kvstore.ClientSecretMetadataKey: secret},
		Busy:     pollread.Busy{},
	})
	if err != nil {
		return nil, err
	}
	inc := uint64(raw[0])<<8 | uint64(raw[1]) | 1
	return &client{id: id, incarnation: inc, conn: conn, rpc: pb.NewMasterClient(conn)}, nil
}

// mount mounts the i-th storage client's segment (a made-up address
// range: the master never reads it).
func (c *client) mount(i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := c.rpc.MountSegment(ctx, &pb.MountSegmentRequest{ClientId: c.id, Segment: &pb.Segment{
		Id: c.id + "-seg", Name: fmt.Sprintf("127.0.0.1:%d", 20000+i), Base: uint64(i+1) << 32, Size: segmentSize,
		TeEndpoint: fmt.Sprintf("127.0.0.1:%d", 20000+i), Protocol: "tcp", Incarnation: c.incarnation,
	}})
	return codeErr(resp.GetErrorCode(), err)
}

func (c *client) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := c.rpc.Ping(ctx, &pb.PingRequest{ClientId: c.id, Incarnation: c.incarnation})
	return codeErr(resp.GetErrorCode(), err)
}

func codeErr(code int32, err error) error {
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("error code %d (%v)", code, kvstore.ErrorCode(code))
	}
	return nil
}

// probe puts, reads and checks 4 KiB objects at rate rounds/s for d and
// returns each call's latencies; any failed call fails the probe.
func (c *client) probe(d time.Duration, rate int) (put, get, exist []time.Duration, err error) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		<-tick.C
		key := fmt.Sprintf("%064x", i)
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		t0 := time.Now()
		ps, err := c.rpc.PutStart(ctx, &pb.PutStartRequest{ClientId: c.id, Key: key, Size: objectSize,
			Config: &pb.ReplicateConfig{ReplicaNum: 1}})
		if err = codeErr(ps.GetErrorCode(), err); err == nil {
			var pe *pb.StatusResponse
			pe, err = c.rpc.PutEnd(ctx, &pb.PutEndRequest{ClientId: c.id, Key: key})
			err = codeErr(pe.GetErrorCode(), err)
		}
		t1 := time.Now()
		var gr *pb.GetReplicaListResponse
		if err == nil {
			gr, err = c.rpc.GetReplicaList(ctx, &pb.KeyRequest{Key: key})
			err = codeErr(gr.GetErrorCode(), err)
		}
		t2 := time.Now()
		var ex *pb.ExistKeyResponse
		if err == nil {
			ex, err = c.rpc.ExistKey(ctx, &pb.KeyRequest{Key: key})
			err = codeErr(ex.GetErrorCode(), err)
		}
		t3 := time.Now()
		cancel()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("round %d: %w", i, err)
		}
		if !ex.GetExists() {
			return nil, nil, nil, fmt.Errorf("round %d: %s put and not found", i, key)
		}
		put, get, exist = append(put, t1.Sub(t0)), append(get, t2.Sub(t1)), append(exist, t3.Sub(t2))
	}
	return put, get, exist, nil
}

// heartbeats pings every client once per heartbeat, spread over the
// interval, on one goroutine per client.
type heartbeats struct {
	count, failures atomic.Int64
	mu              sync.Mutex
	lat             []time.Duration
	err             error
	wg              sync.WaitGroup
}

func startHeartbeats(ctx context.Context, clients []*client) *heartbeats {
	h := &heartbeats{}
	for i, c := range clients {
		offset := heartbeat * time.Duration(i) / time.Duration(len(clients))
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(offset):
			}
			t := time.NewTicker(heartbeat)
			defer t.Stop()
			for {
				t0 := time.Now()
				err := c.ping()
				h.record(time.Since(t0), err, ctx)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	return h
}

func (h *heartbeats) record(d time.Duration, err error, ctx context.Context) {
	if err != nil {
		if ctx.Err() == nil {
			h.failures.Add(1)
			h.mu.Lock()
			if h.err == nil {
				h.err = err
			}
			h.mu.Unlock()
		}
		return
	}
	h.count.Add(1)
	h.mu.Lock()
	h.lat = append(h.lat, d)
	h.mu.Unlock()
}

func (h *heartbeats) resetLatencies() {
	h.mu.Lock()
	h.lat = h.lat[:0]
	h.mu.Unlock()
}

func (h *heartbeats) latencies() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lat)
}

func (h *heartbeats) firstError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *heartbeats) wait() { h.wg.Wait() }
