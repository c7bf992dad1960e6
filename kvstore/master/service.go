package master

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/mooncake-go/mooncake/internal/framedrpc"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/kvstore/master/replication"
	"github.com/mooncake-go/mooncake/transfer/metaserver"
)

// maxMsgBytes bounds one gRPC message: large batches of keys or replica
// lists exceed gRPC's 4 MiB default.
const maxMsgBytes = 64 << 20

// ServiceConfig describes a whole mooncake_master process: the gRPC
// service, the admin HTTP endpoint, the optional embedded HTTP metadata
// store and optional HA.
type ServiceConfig struct {
	// RPCAddress is where the gRPC service listens ("0.0.0.0:50051";
	// "127.0.0.1:0" picks a free port).
	RPCAddress string
	// MetricsAddress is where the admin HTTP endpoint listens; empty
	// disables it.
	MetricsAddress string
	// HTTPMetadataAddress, when not empty, serves the Transfer Engine
	// HTTP metadata store (GET/PUT/DELETE /metadata, /health) there.
	HTTPMetadataAddress string
	// HTTPMetadataLimits is the embedded metadata store's budget (keys,
	// bytes); nil takes metaserver.DefaultLimits.
	HTTPMetadataLimits *metaserver.Limits
	// RPCIdleTimeout, when positive, closes an RPC connection (framed or
	// gRPC) that carried no call for that long; clients dial again on
	// their next call (upstream's --rpc_conn_timeout_seconds).
	RPCIdleTimeout time.Duration
	// RPCNagle leaves Nagle's algorithm on for RPC connections
	// (--rpc_enable_tcp_no_delay=false); by default they set TCP_NODELAY.
	RPCNagle bool
	// TLS, when not nil, makes every listener serve TLS with it: the RPC
	// port (gRPC and framed calls alike), the admin HTTP endpoint and the
	// embedded metadata store. A config that requires client certificates
	// (tlsconf.Files.Server with a CA) makes it mutual TLS on all of them.
	TLS *tls.Config
	// Server configures the object table and background loops.
	Server Options
	// HA, when not nil, runs leader election; the server stands by until
	// elected. HA.Advertise defaults to the RPC listener's address.
	HA *replication.HAConfig
	// Logger for the service; slog.Default() when nil.
	Logger *slog.Logger
}

// Service is a running master. Close stops it.
type Service struct {
	// Server is the gRPC service and state machine.
	Server *Server
	// Metadata is the embedded HTTP metadata store, nil when disabled.
	Metadata *metaserver.Server

	log      *slog.Logger
	grpc     *grpc.Server
	framed   *framedrpc.Server
	rpcLn    net.Listener
	https    []*http.Server
	httpAddr map[string]string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closeMu  sync.Once
}

// StartService listens on every configured address and starts serving. On
// error nothing is left running.
func StartService(cfg ServiceConfig) (_ *Service, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Service{log: log, httpAddr: map[string]string{}}
	var lns []net.Listener
	defer func() {
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
		}
	}()
	listen := func(addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		lns = append(lns, ln)
		return ln, nil
	}

	opts := cfg.Server
	if opts.Logger == nil {
		opts.Logger = log
	}
	if cfg.HTTPMetadataAddress != "" {
		lim := metaserver.DefaultLimits()
		if cfg.HTTPMetadataLimits != nil {
			lim = *cfg.HTTPMetadataLimits
		}
		s.Metadata = metaserver.NewLimited(lim)
		if opts.Metadata == nil {
			opts.Metadata = s.Metadata
		}
	}
	if cfg.HA != nil {
		if err := cfg.HA.Check(); err != nil {
			return nil, err
		}
	}
	opts.Standby = cfg.HA != nil
	opts.HA = cfg.HA != nil
	if cfg.HA != nil && cfg.HA.ClusterID != "" {
		opts.ClusterID = cfg.HA.ClusterID
	}
	if opts.ClusterID == "" {
		opts.ClusterID = replication.DefaultClusterID
	}
	srv, err := NewServer(opts)
	if err != nil {
		return nil, err
	}
	s.Server = srv
	if cfg.HA != nil && cfg.HA.Oplog {
		srv.EnableOplog()
		if cfg.HA.Snapshot != nil {
			if err := srv.EnableSnapshots(*cfg.HA.Snapshot); err != nil {
				return nil, err
			}
		}
		// A master that could only serve a partial state fails now; one
		// that cannot reach etcd yet starts and retries as before.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := CheckSnapshotRestore(ctx, *cfg.HA, srv)
		cancel()
		if errors.Is(err, replication.ErrSnapshotNeeded) {
			return nil, err
		} else if err != nil {
			log.Warn("snapshot: cannot check the oplog's start in etcd yet", "err", err)
		}
	}

	if s.rpcLn, err = listen(cfg.RPCAddress); err != nil {
		return nil, err
	}
	rpcConns := s.rpcLn
	if cfg.RPCNagle {
		rpcConns = nagleListener{s.rpcLn}
	}
	// TLS ends before the framed and gRPC connections part: both arrive
	// through the one listener, and gRPC takes the connections as they
	// are (tlsconf.Terminated), with their TLS state for its peers.
	rpcConns = tlsconf.Listen(rpcConns, tlsconf.WithH2(cfg.TLS))
	type httpSvc struct {
		name, addr string
		h          http.Handler
	}
	var hs []httpSvc
	if cfg.MetricsAddress != "" {
		hs = append(hs, httpSvc{"metrics", cfg.MetricsAddress, srv.AdminHandler()})
	}
	if s.Metadata != nil {
		hs = append(hs, httpSvc{"metadata", cfg.HTTPMetadataAddress, s.Metadata})
	}
	httpLns := make([]net.Listener, len(hs))
	for i, h := range hs {
		if httpLns[i], err = listen(h.addr); err != nil {
			return nil, err
		}
		s.httpAddr[h.name] = httpLns[i].Addr().String()
		httpLns[i] = tlsconf.Listen(httpLns[i], cfg.TLS)
	}

	// Everything is bound: start serving.
	grpcOpts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsgBytes), grpc.MaxSendMsgSize(maxMsgBytes),
		// Serve RPCs on a pool of long-lived goroutines instead of one new
		// goroutine per call: about 20-40% less latency per RPC between
		// processes on a loaded 2-CPU machine (benchmarks/README.md,
		// "KV store put/get against Redis").
		grpc.NumStreamWorkers(uint32(max(4, runtime.GOMAXPROCS(0)))),
		// Clients may keep idle connections alive with pings every few
		// seconds; the default policy (5 min) would drop them.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// MaxConnectionIdle 0 is gRPC's default: never.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: max(cfg.RPCIdleTimeout, 0)}),
	}
	if cfg.TLS != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(tlsconf.Terminated()))
	}
	s.grpc = grpc.NewServer(grpcOpts...)
	srv.Register(s.grpc)
	// The same service over framed connections on the same port: the
	// clients' transport (internal/framedrpc); gRPC stays for every other
	// caller.
	s.framed = framedrpc.NewServer(log)
	s.framed.IdleTimeout = cfg.RPCIdleTimeout
	srv.Register(s.framed)
	grpcLn := s.framed.Split(rpcConns)
	srv.Start()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(grpcLn); err != nil {
			log.Error("gRPC server stopped", "err", err)
		}
	}()
	for i, h := range hs {
		hsrv := &http.Server{Handler: h.h, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		s.https = append(s.https, hsrv)
		ln := httpLns[i]
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := hsrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("HTTP server stopped", "service", h.name, "err", err)
			}
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if cfg.HA != nil {
		ha := *cfg.HA
		if ha.Advertise == "" {
			ha.Advertise = s.rpcLn.Addr().String()
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = runElection(ctx, ha, srv, log)
		}()
	}
	log.Info("mooncake_master serving", "rpc", s.RPCAddr(), "metrics", s.httpAddr["metrics"],
		"http_metadata", s.httpAddr["metadata"], "ha", cfg.HA != nil, "tls", cfg.TLS != nil,
		"mutual_tls", cfg.TLS != nil && cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert)
	return s, nil
}

// RPCAddr is the gRPC listener's address (host:port).
func (s *Service) RPCAddr() string { return s.rpcLn.Addr().String() }

// MetricsAddr is the admin HTTP listener's address, "" when disabled.
func (s *Service) MetricsAddr() string { return s.httpAddr["metrics"] }

// MetadataAddr is the embedded HTTP metadata store's address, "" when
// disabled; its URL is "http://" + MetadataAddr() + "/metadata".
func (s *Service) MetadataAddr() string { return s.httpAddr["metadata"] }

// Close stops elections (revoking a held master view lease), the RPC and
// HTTP servers and the background loops, and waits for them.
func (s *Service) Close() {
	s.closeMu.Do(func() {
		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		for _, h := range s.https {
			_ = h.Shutdown(ctx)
		}
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); s.framed.Close(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			s.grpc.Stop()
		}
		s.wg.Wait()
		s.Server.Close()
		s.log.Info("mooncake_master stopped")
	})
}

// nagleListener turns Nagle's algorithm back on for every connection it
// accepts (Go sets TCP_NODELAY by default).
type nagleListener struct{ net.Listener }

func (l nagleListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && err == nil {
		_ = tc.SetNoDelay(false)
	}
	return c, err
}
