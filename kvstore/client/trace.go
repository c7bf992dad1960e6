package client

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/transfer"
)

// Tracing (docs/store-operations.md#tracing-and-the-metrics-server): every API call of a client
// and every phase of one (a master RPC, a transfer, a task's copy) is a
// span. Spans always feed the client's breakdown (count, errors, time,
// bytes per name); the process-wide sinks also write them out: log lines
// (MC_STORE_RS_TRACE on stderr, or MC_STORE_RS_TRACE_FILE) and JSON lines
// (MC_STORE_RS_TRACE_JSONL_FILE; the metrics server's POST /tracing
// switches that sink off and on again, never to another file).

// TraceSpan is one record of the JSONL sink.
type TraceSpan struct {
	TimeUs    int64  `json:"ts_us"`        // start, Unix microseconds
	DurUs     int64  `json:"dur_us"`       // duration, microseconds
	Kind      string `json:"kind"`         // "api" or "phase"
	Name      string `json:"name"`         // e.g. "put", "master.BatchPutStart", "transfer.write"
	Status    int    `json:"status"`       // 0, or the first error number
	Failed    int    `json:"failed"`       // items that failed (batches)
	Keys      int    `json:"keys"`         // keys the call names
	Key       string `json:"key"`          // the first key: hashed (FNV-1a 64, hex) unless MC_STORE_RS_TRACE_KEY_MODE=full
	Bytes     uint64 `json:"bytes"`        // payload bytes the call moves
	Namespace string `json:"namespace"`    // the client's namespace (kvstore.Namespace.Encode)
	Runtime   string `json:"runtime_id"`   // the client's id
	Host      string `json:"runtime_host"` // the client's hostname
	PID       int    `json:"pid"`
}

// sinks are the process-wide span writers.
type sinks struct {
	mu       sync.Mutex
	text     *slog.Logger // nil: off
	textFile *os.File
	jsonl    *os.File // nil: off
	path     string
	fullKeys bool
	// open says whether text or jsonl is set, read without mu: a span
	// that no sink writes needs neither the lock nor its record's key and
	// pid (spans end on every call, and the breakdown alone uses neither).
	open atomic.Bool
}

var traceSinks sinks

// TracingStatus says where spans go.
type TracingStatus struct {
	Text      bool   `json:"text"`
	TextFile  string `json:"text_file"`
	JSONLFile string `json:"jsonl_file"`
	KeyMode   string `json:"key_mode"`
}

// TraceSettings are the sinks to open: the values of MC_STORE_RS_TRACE
// (Text), MC_STORE_RS_TRACE_FILE, MC_STORE_RS_TRACE_JSONL_FILE and
// MC_STORE_RS_TRACE_KEY_MODE.
type TraceSettings struct {
	Text      bool   `json:"text"`
	TextFile  string `json:"text_file"`
	JSONLFile string `json:"jsonl_file"`
	KeyMode   string `json:"key_mode"`
}

// TraceSettingsFromEnv reads the settings from the process environment
// as this runtime saw it when it started.
func TraceSettingsFromEnv() TraceSettings {
	return TraceSettings{Text: envvars.StoreRSTrace.Enabled(), TextFile: envvars.StoreRSTraceFile.Value(),
		JSONLFile: envvars.StoreRSTraceJSONL.Value(), KeyMode: envvars.StoreRSTraceKeyMode.Value()}
}

// InitTracing opens the sinks ts names; a sink already open stays. New
// clients call it with TraceSettingsFromEnv; Python's init_tracing and
// setup pass the variables as Python sees them (the Go runtime's copy of
// the environment does not follow later changes).
func InitTracing(ts TraceSettings) (TracingStatus, error) {
	s := &traceSinks
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ts.KeyMode {
	case "", "hash":
		s.fullKeys = false
	case "full":
		s.fullKeys = true
	default:
		return s.status(), fmt.Errorf("%w: MC_STORE_RS_TRACE_KEY_MODE=%q: want hash or full", kvstore.InvalidParams, ts.KeyMode)
	}
	if path := ts.TextFile; path != "" && s.textFile == nil {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return s.status(), fmt.Errorf("%w: MC_STORE_RS_TRACE_FILE: %v", kvstore.InvalidParams, err)
		}
		s.textFile, s.text = f, slog.New(slog.NewTextHandler(f, nil))
	} else if s.text == nil && ts.Text {
		s.text = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if path := ts.JSONLFile; path != "" && s.jsonl == nil {
		if err := s.openJSONL(path); err != nil {
			return s.status(), err
		}
	}
	return s.status(), nil
}

// SetJSONLTracing turns the JSONL sink off, or on again: on the file
// fixed at setup (the last one InitTracing opened, from
// MC_STORE_RS_TRACE_JSONL_FILE). No caller chooses a path here: the
// metrics server's /tracing reaches it over the network.
func SetJSONLTracing(on bool) (TracingStatus, error) {
	s := &traceSinks
	s.mu.Lock()
	defer s.mu.Unlock()
	if !on {
		if s.jsonl != nil {
			s.jsonl.Close()
			s.jsonl = nil
		}
		return s.status(), nil
	}
	if s.jsonl != nil {
		return s.status(), nil
	}
	if s.path == "" {
		return s.status(), errNoTraceSink
	}
	err := s.openJSONL(s.path)
	return s.status(), err
}

// errNoTraceSink is SetJSONLTracing(true) before any JSONL file was
// configured.
var errNoTraceSink = fmt.Errorf("%w: no JSONL trace file is configured (set MC_STORE_RS_TRACE_JSONL_FILE before setup)", kvstore.InvalidParams)

func (s *sinks) openJSONL(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%w: trace file: %v", kvstore.InvalidParams, err)
	}
	s.jsonl, s.path = f, path
	return nil
}

// status says where spans go, and sets open to match; s.mu is held
// (every change of the sinks ends with it).
func (s *sinks) status() TracingStatus {
	s.open.Store(s.text != nil || s.jsonl != nil)
	st := TracingStatus{Text: s.text != nil, KeyMode: "hash"}
	if s.fullKeys {
		st.KeyMode = "full"
	}
	if s.textFile != nil {
		st.TextFile = s.textFile.Name()
	}
	if s.jsonl != nil {
		st.JSONLFile = s.path
	}
	return st
}

// write sends sp to the open sinks, with its first key (firstKey) in
// the sinks' key mode and this process's id.
func (s *sinks) write(sp TraceSpan, firstKey string) {
	if !s.open.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sp.Key, sp.PID = s.key(firstKey), os.Getpid()
	if s.text != nil {
		s.text.Info("store span", "kind", sp.Kind, "name", sp.Name, "dur_us", sp.DurUs, "status", sp.Status,
			"failed", sp.Failed, "keys", sp.Keys, "key", sp.Key, "bytes", sp.Bytes, "namespace", sp.Namespace,
			"runtime_id", sp.Runtime)
	}
	if s.jsonl != nil {
		b, _ := json.Marshal(sp)
		s.jsonl.Write(append(b, '\n'))
	}
}

// key is k as the sinks write it; s.mu is held.
func (s *sinks) key(k string) string {
	if s.fullKeys || k == "" {
		return k
	}
	h := fnv.New64a()
	io.WriteString(h, k)
	return fmt.Sprintf("%016x", h.Sum64())
}

// Stat sums the spans of one name.
type Stat struct {
	Count   uint64 `json:"count"`
	Errors  uint64 `json:"errors"` // spans with a non-zero status or failed items
	TotalUs uint64 `json:"total_us"`
	MaxUs   uint64 `json:"max_us"`
	Bytes   uint64 `json:"bytes"`
}

// tracer records one client's spans.
type tracer struct {
	runtime, host, ns string
	started           time.Time
	mu                sync.Mutex
	stats             map[spanName]*Stat
}

// spanName is a span's kind and name, the breakdown's key.
type spanName struct{ kind, name string }

func newTracer(runtime, host string, ns kvstore.Namespace) *tracer {
	return &tracer{runtime: runtime, host: host, ns: ns.Encode(), started: time.Now(), stats: map[spanName]*Stat{}}
}

// openSpan is a span being timed; one of its end methods closes it.
type openSpan struct {
	t        *tracer
	sp       TraceSpan
	firstKey string // the call's first key, as given
	begin    time.Time
}

// start opens a span of kind named name over keys moving bytes.
func (t *tracer) start(kind, name string, keys []string, bytes uint64) *openSpan {
	o := &openSpan{t: t, begin: time.Now(), sp: TraceSpan{Kind: kind, Name: name, Keys: len(keys), Bytes: bytes,
		Namespace: t.ns, Runtime: t.runtime, Host: t.host}}
	if len(keys) > 0 {
		o.firstKey = keys[0]
	}
	return o
}

// end closes the span: status is 0 or an error number, failed the items
// that failed.
func (o *openSpan) end(status, failed int) {
	o.sp.TimeUs, o.sp.DurUs = o.begin.UnixMicro(), time.Since(o.begin).Microseconds()
	o.sp.Status, o.sp.Failed = status, failed
	o.t.record(o.sp)
	traceSinks.write(o.sp, o.firstKey)
}

// endErr closes the span with *err's number.
func (o *openSpan) endErr(err *error) { o.end(errCode(*err), min(1, -errCode(*err))) }

// endErrs closes the span of a batch with per-key errors.
func (o *openSpan) endErrs(errs []error) { o.end(codes(errs, errCode)) }

// endInts closes the span of a batch with per-key numbers (negative:
// failed).
func (o *openSpan) endInts(rs []int) { o.end(codes(rs, func(n int) int { return n })) }

// endResults closes the span of a read: its bytes are those read.
func (o *openSpan) endResults(rs []GetResult) {
	for _, r := range rs {
		if r.Err == nil {
			o.sp.Bytes += r.Size
		}
	}
	o.end(codes(rs, func(r GetResult) int { return errCode(r.Err) }))
}

// record adds sp to the breakdown.
func (t *tracer) record(sp TraceSpan) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := spanName{sp.Kind, sp.Name}
	st := t.stats[key]
	if st == nil {
		st = &Stat{}
		t.stats[key] = st
	}
	st.Count++
	if sp.Status != 0 || sp.Failed > 0 {
		st.Errors++
	}
	us := uint64(max(sp.DurUs, 0))
	st.TotalUs += us
	st.MaxUs = max(st.MaxUs, us)
	st.Bytes += sp.Bytes
}

// api opens the span of an API call.
func (t *tracer) api(name string, keys []string, bytes uint64) *openSpan {
	return t.start("api", name, keys, bytes)
}

// phase opens the span of one phase of a call.
func (t *tracer) phase(name string, keys []string, bytes uint64) *openSpan {
	return t.start("phase", name, keys, bytes)
}

// codes folds per-item results into a span's status and failed count.
func codes[T any](items []T, code func(T) int) (status, failed int) {
	for _, it := range items {
		if c := code(it); c < 0 {
			failed++
			if status == 0 {
				status = c
			}
		}
	}
	return status, failed
}

func errCode(err error) int { return int(kvstore.CodeOf(err)) }

// totalSize is the bytes of every key's parts.
func totalSize(parts [][]Part) uint64 {
	var n uint64
	for _, p := range parts {
		n += partsSize(p)
	}
	return n
}

// Breakdown is a client's span summary, for diagnosis (the metrics
// server's /breakdown and `mooncake store stats --breakdown`).
type Breakdown struct {
	Runtime  RuntimeInfo     `json:"runtime"`
	APIs     map[string]Stat `json:"apis"`
	Phases   map[string]Stat `json:"phases"` // "master.*" metadata RPCs, "transfer.*", "task.*"
	Segments []SegmentInfo   `json:"segments"`
	Tracing  TracingStatus   `json:"tracing"`
}

// RuntimeInfo identifies the client a breakdown is from.
type RuntimeInfo struct {
	ID        string  `json:"id"`
	Host      string  `json:"host"`
	Namespace string  `json:"namespace"`
	PID       int     `json:"pid"`
	UptimeS   float64 `json:"uptime_s"`
}

// SegmentInfo is one of the client's segments in a breakdown.
type SegmentInfo struct {
	ID   string `json:"id"`
	Size uint64 `json:"size"`
	Mode string `json:"mode"` // as this client last set it
}

// Breakdown returns the client's span summary.
func (c *Client) Breakdown() Breakdown {
	t := c.trace
	b := Breakdown{
		Runtime: RuntimeInfo{ID: t.runtime, Host: t.host, Namespace: t.ns, PID: os.Getpid(), UptimeS: time.Since(t.started).Seconds()},
		APIs:    map[string]Stat{}, Phases: map[string]Stat{}, Segments: []SegmentInfo{},
	}
	t.mu.Lock()
	for k, st := range t.stats {
		if k.kind == "api" {
			b.APIs[k.name] = *st
		} else {
			b.Phases[k.name] = *st
		}
	}
	t.mu.Unlock()
	c.segMu.Lock()
	for _, s := range c.segments {
		b.Segments = append(b.Segments, SegmentInfo{ID: s.Id, Size: s.Size, Mode: c.modes.of(s.Id).String()})
	}
	c.segMu.Unlock()
	traceSinks.mu.Lock()
	b.Tracing = traceSinks.status()
	traceSinks.mu.Unlock()
	return b
}

// tracedConn makes every master call, over either transport, a
// "master.<Method>" phase span with the response's error code.
type tracedConn struct {
	grpc.ClientConnInterface
	t *tracer
}

// Invoke implements grpc.ClientConnInterface.
func (c tracedConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	sp := c.t.phase("master."+path.Base(method), nil, 0)
	err := c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	status := errCode(rpcResult(0, err))
	if r, ok := reply.(interface{ GetErrorCode() int32 }); ok && err == nil {
		status = int(r.GetErrorCode())
	}
	sp.end(status, 0)
	return err
}

// transferPhase names the phase span of a transfer.
func transferPhase(op transfer.Opcode) string {
	if op == transfer.OpRead {
		return "transfer.read"
	}
	return "transfer.write"
}
