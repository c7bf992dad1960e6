package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/internal/procmetrics"
	"github.com/mooncake-go/mooncake/kvstore"
)

// metricsServer is a client's HTTP server of its span breakdown:
// /metrics (Prometheus text), /breakdown (JSON) and /tracing (GET: the
// sinks' state; POST: the JSONL sink on or off).
type metricsServer struct {
	mu  sync.Mutex
	srv *http.Server
	ln  net.Listener
}

// MetricsText is the breakdown in the Prometheus text format: per API
// call and per phase, the spans, the failed ones, their time and bytes;
// then the counters of the client's Transfer Engine
// (transfer.Engine.MetricsText).
func (c *Client) MetricsText() string {
	b := c.Breakdown()
	var sb strings.Builder
	write := func(kind string, stats map[string]Stat) {
		names := make([]string, 0, len(stats))
		for n := range stats {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, metric := range []struct {
			suffix, help string
			value        func(Stat) uint64
		}{
			{"calls_total", "spans", func(s Stat) uint64 { return s.Count }},
			{"errors_total", "spans that failed", func(s Stat) uint64 { return s.Errors }},
			{"time_us_total", "time in the spans, microseconds", func(s Stat) uint64 { return s.TotalUs }},
			{"bytes_total", "payload bytes of the spans", func(s Stat) uint64 { return s.Bytes }},
		} {
			name := "mooncake_store_" + kind + "_" + metric.suffix
			fmt.Fprintf(&sb, "# HELP %s %s %s\n# TYPE %s counter\n", name, kind, metric.help, name)
			for _, n := range names {
				fmt.Fprintf(&sb, "%s{%s=%q} %d\n", name, kind, n, metric.value(stats[n]))
			}
		}
	}
	write("api", b.APIs)
	write("phase", b.Phases)
	sb.WriteString(c.engine.MetricsText())
	return sb.String()
}

// StartMetricsServer serves the metrics on addr ("host:port"; port 0
// picks a free one) and returns the address it listens on. A second call
// while one runs is INVALID_PARAMS.
func (c *Client) StartMetricsServer(addr string) (string, error) {
	if !c.life.Enter() {
		return "", errClientClosed
	}
	defer c.life.Exit()
	m := &c.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv != nil {
		return "", fmt.Errorf("%w: the metrics server runs already on %s", kvstore.InvalidParams, m.ln.Addr())
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("%w: metrics server: %v", kvstore.InvalidParams, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(c.MetricsText()))
		procmetrics.Read().Write(w)
	})
	mux.HandleFunc("GET /breakdown", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, c.Breakdown())
	})
	tracingRoutes(mux)
	m.srv, m.ln = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln
	go func(srv *http.Server) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.trace.phase("metrics.serve", nil, 0).endErr(&err)
		}
	}(m.srv)
	return ln.Addr().String(), nil
}

// tracingRoutes serves /tracing on mux: GET reads, POST switches; any
// other method is 405.
func tracingRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /tracing", tracingState)
	mux.HandleFunc("POST /tracing", tracingControl)
}

// maxTracingForm bounds the body of a POST /tracing.
const maxTracingForm = 4 << 10

// tracingState is GET /tracing: where spans go. It changes nothing, so
// a GET that asks for a change (enabled= or file=) is 405: a link or an
// image tag must not switch tracing.
func tracingState(w http.ResponseWriter, r *http.Request) {
	if q := r.URL.Query(); q.Has("enabled") || q.Has("file") {
		w.Header().Set("Allow", "POST")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "GET /tracing only reads the state: switch it with POST /tracing?enabled=on|off"})
		return
	}
	traceSinks.mu.Lock()
	st := traceSinks.status()
	traceSinks.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
}

// tracingControl is POST /tracing: enabled=on|off (in the query or a
// form body) switches the JSONL sink fixed at setup. A file= is refused:
// the sink's path is never taken from a request.
func tracingControl(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxTracingForm)
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad form: " + err.Error()})
		return
	}
	if r.Form.Has("file") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "file= is not accepted: the JSONL trace file is fixed at setup (MC_STORE_RS_TRACE_JSONL_FILE)"})
		return
	}
	var st TracingStatus
	var err error
	switch v := r.Form.Get("enabled"); v {
	case "on", "true", "1":
		st, err = SetJSONLTracing(true)
	case "off", "false", "0":
		st, err = SetJSONLTracing(false)
	default:
		err = fmt.Errorf("enabled=%q: want on or off", v)
	}
	if errors.Is(err, errNoTraceSink) {
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// MetricsServerAddress is where the metrics server listens ("" when it
// does not run).
func (c *Client) MetricsServerAddress() string {
	c.metrics.mu.Lock()
	defer c.metrics.mu.Unlock()
	if c.metrics.ln == nil {
		return ""
	}
	return c.metrics.ln.Addr().String()
}

// StopMetricsServer stops the metrics server; false if none ran.
func (c *Client) StopMetricsServer() bool {
	m := &c.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.srv == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
	m.srv, m.ln = nil, nil
	return true
}
