// Command mooncake_client runs a standalone store client: the real client
// (kvstore/client) as a daemon that mounts --global_segment_size bytes in
// the pool and serves dummy clients (kvstore/standalone) on the abstract
// Unix socket @mooncake_client_<port>.sock. Flags keep upstream's names and
// defaults.
//
// Setup: while the metadata server or the master cannot be reached (not
// started yet, restarting), the daemon keeps retrying with backoff (up to
// 5 s apart), logging a failure when it changes and otherwise every 30 s;
// --setup_timeout=N gives up (exit 1) after N seconds. SIGTERM or SIGINT
// while it waits exits 0. Other setup failures (bad flags, no memory for
// the segment) exit 1 at once.
//
// TCP --port (readyListener): once it serves dummies the daemon accepts
// TCP connections on --port at --host's address (loopback when --host is
// a wildcard) and closes them at once, a readiness signal for launchers;
// the dummy protocol itself is served on the Unix socket only.
//
// Shutdown (SIGTERM, SIGINT): dummy calls that arrive are refused
// (UNAVAILABLE_IN_CURRENT_STATUS), running ones finish, the dummies'
// connections close (their later calls fail with RPC_FAIL until a daemon
// is back), then the client unmounts its segment and exits 0.
//
// Usage:
//
//	mooncake_client --host=127.0.0.1 --master_server_address=127.0.0.1:50051 \
//	    --metadata_server=http://127.0.0.1:8080/metadata --global_segment_size="4 GB"
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/logging"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
	"github.com/mooncake-go/mooncake/kvstore/standalone"
)

func main() {
	logging.Setup()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	err := run(os.Args[1:], os.Stderr, stop)
	os.Exit(cli.Report(os.Stderr, "mooncake_client", err, nil))
}

func run(args []string, out io.Writer, stop <-chan os.Signal) error {
	o, err := parse(args, out)
	if err != nil {
		return err
	}
	log := slog.Default()
	if o.tls.Enabled() {
		// The flags stand for MC_TLS_*, which the store client reads when
		// it dials the master and the metadata server.
		if _, err := o.tls.Client(); err != nil {
			return err
		}
		o.tls.Export()
	}
	name, err := localName(o.host, o.masterAddress)
	if err != nil {
		return fmt.Errorf("store client setup: %w", err)
	}
	c, err := setupClient(client.Config{
		LocalHostname: name, MetadataServer: o.metadataServer, GlobalSegmentSize: o.globalSegmentSize,
		LocalBufferSize: o.localBufferSize, Protocol: o.protocol, DeviceName: o.deviceNames,
		MasterServerAddr: o.masterAddress, TenantID: o.tenantID,
	}, time.Duration(o.setupTimeout)*time.Second, stop, log)
	if errors.As(err, new(errStopped)) {
		log.Info("mooncake_client stopped", "reason", err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("store client setup: %w", err)
	}
	defer c.Close() // unmounts the segment, after the server below stopped
	hc := hotcache.ConfigFromEnv()
	socket := ipc.SocketName(o.port)
	srv, err := standalone.NewServer(standalone.ServerConfig{Client: c, Socket: socket, Keyspace: o.tenantID, HotCache: hc,
		Allowed:     ipc.Admission{UIDs: o.allowedUIDs, GIDs: o.allowedGIDs},
		PerDummy:    ipc.Limits{MaxInFlight: o.maxRequestsPerDummy, ReplyTimeout: time.Duration(o.dummyReplyTimeout) * time.Second},
		MaxRequests: o.maxRequestsInFlight})
	if err != nil {
		return err
	}
	defer srv.Close()
	var httpSrv *http.Server
	if o.enableHTTPServer {
		host := "" // without --host, every address, as before the default became routable
		if o.host != "" {
			host, _, _ = net.SplitHostPort(c.Hostname())
		}
		addr := net.JoinHostPort(host, strconv.Itoa(o.httpPort))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("http server on %s: %w", addr, err)
		}
		httpSrv = &http.Server{Handler: handler(srv, c), ReadHeaderTimeout: 5 * time.Second}
		go httpSrv.Serve(ln)
		log.Info("mooncake_client http server", "address", ln.Addr().String())
	}
	ready, err := listenReady(readyAddress(o.host, o.port))
	if err != nil {
		return err
	}
	defer ready.Close()
	log.Info("mooncake_client ready", "hostname", c.Hostname(), "socket", socket[1:], "tcp_port", ready.Addr(),
		"master", o.masterAddress,
		"global_segment_size", o.globalSegmentSize, "tenant_id", o.tenantID,
		"hot_cache_size", hc.Size, "hot_cache_block", hc.BlockSize, "hot_cache_shm", hc.Shared)
	sig := <-stop
	log.Info("mooncake_client stopping: finishing running calls, then unmounting", "signal", fmt.Sprint(sig))
	ready.Close()
	if httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		httpSrv.Shutdown(ctx)
		cancel()
	}
	srv.Close()
	c.Close()
	log.Info("mooncake_client stopped")
	return nil
}

// handler serves /metrics and /health.
func handler(srv *standalone.Server, c *client.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, srv.MetricsText())
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		if h := c.Health(); h != client.Healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "unhealthy (health_check %d)\n", h)
			return
		}
		io.WriteString(w, "OK\n")
	})
	return mux
}
