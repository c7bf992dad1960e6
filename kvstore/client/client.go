package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/lifecycle"
	"github.com/mooncake-go/mooncake/internal/nodeid"
	"github.com/mooncake-go/mooncake/kvstore"
	pb "github.com/mooncake-go/mooncake/kvstore/masterpb"
	"github.com/mooncake-go/mooncake/transfer"
	"github.com/mooncake-go/mooncake/transfer/hugepage"
	"github.com/mooncake-go/mooncake/transfer/metadata"
)

// Health values, as upstream's health_check returns them.
const (
	Healthy           = 0
	NotInitialized    = 1
	MasterUnreachable = 2
)

// heartbeatInterval is how often the client pings the master (upstream 1 s).
const heartbeatInterval = time.Second

// Client is one store client. Methods are safe for concurrent use.
type Client struct {
	id       string
	hostname string // effective local hostname, host:port
	hostID   string
	engine   *transfer.Engine
	ownsTE   bool
	master   *masterConn
	reserved reserver // blocks for one-round-trip puts (reserved.go)

	segMu    sync.Mutex        // guards segments and mounts
	segments []*pb.Segment     // every segment mounted, in mount order
	mounts   map[string]*mount // segments mounted after setup, by id
	local    []byte            // local buffer, mmap'd; staging chunks and leases
	arena    *arena            // allocator over local
	staging  *stagingPool
	tempMu   sync.Mutex
	temps    map[uintptr]*tempReg // by address; see useDirect
	sessions sessions             // open batch_*_session sessions
	tasks    runningTasks         // copy/move tasks being executed
	fleet    FleetConfig          // Store-RS options, fixed at setup
	modes    segmentModes         // lifecycle modes set on own segments (fleet.go)
	trace    *tracer              // spans and their breakdown (trace.go)
	metrics  metricsServer        // serves the breakdown (metrics_server.go)
	disk     diskSide             // the disk tier (offload.go)
	fs       fsSide               // shared-file-system DISK replicas (fsdisk.go)

	lastPingOK atomic.Bool
	// life admits every call while the client is open; Close releases the
	// memory only after the calls it admitted have returned.
	life lifecycle.Gate
	stop chan struct{}
	wg   sync.WaitGroup
}

// New sets a client up: it starts (or shares) a Transfer Engine, allocates
// the local buffer, connects to the master and mounts GlobalSegmentSize
// bytes as this client's segment.
func New(cfg Config) (*Client, error) {
	if cfg.MetadataServer == "" || cfg.LocalHostname == "" {
		return nil, fmt.Errorf("%w: local_hostname and metadata_server are required", kvstore.InvalidParams)
	}
	if err := cfg.Fleet.Validate(); err != nil {
		return nil, err
	}
	if err := checkLocalName(cfg); err != nil {
		return nil, err
	}
	c := &Client{id: newID(), stop: make(chan struct{}), hostID: nodeid.ID(), temps: map[uintptr]*tempReg{}, mounts: map[string]*mount{},
		fleet: cfg.Fleet}
	var err error
	if c.hostname, err = effectiveHostname(cfg.LocalHostname); err != nil {
		return nil, err
	}
	if _, err := InitTracing(TraceSettingsFromEnv()); err != nil {
		return nil, err
	}
	// Upstream answers an unusable protocol with -1 (INTERNAL_ERROR).
	if _, _, err := transfer.ResolveProtocol(cfg.Protocol, cfg.DeviceName); err != nil {
		return nil, fmt.Errorf("%w: %v", kvstore.InternalError, err)
	}
	if cfg.Engine != nil {
		c.engine = cfg.Engine
	} else {
		if c.engine, err = c.startEngine(cfg); err != nil {
			return nil, fmt.Errorf("%w: transfer engine: %w", kvstore.InvalidParams, err)
		}
		c.ownsTE = true
	}
	c.trace = newTracer(c.id, c.hostname, cfg.Fleet.Namespace)
	if err := c.setup(cfg); err != nil {
		c.Close()
		return nil, err
	}
	c.wg.Add(1)
	go c.heartbeat()
	return c, nil
}

func (c *Client) setup(cfg Config) error {
	if cfg.HugePageSize != 0 && !hugepage.Valid(cfg.HugePageSize) {
		return fmt.Errorf("%w: huge page size %d: want 2 MiB or 1 GiB", kvstore.InvalidParams, cfg.HugePageSize)
	}
	if cfg.LocalBufferSize > 0 {
		buf, err := mapLocalBuffer(cfg.LocalBufferSize, cfg.HugePageSize)
		if err != nil {
			return fmt.Errorf("%w: local buffer of %d bytes: %v", kvstore.InvalidParams, cfg.LocalBufferSize, err)
		}
		c.local = buf
		if err := c.engine.RegisterLocalOnly(gpu.AddrOf(buf), uint64(len(buf))); err != nil {
			return err
		}
	}
	c.arena = newArena(c.local)
	c.staging = newStagingPool(c.arena, c.engine)
	var err error
	if c.master, err = dialMaster(cfg.MasterServerAddr, cfg.TenantID, newSecret(), cfg.Fleet.Namespace, c.trace); err != nil {
		return fmt.Errorf("%w: %w", kvstore.RPCFail, err)
	}
	if err := c.setupFS(); err != nil {
		return err
	}
	if cfg.GlobalSegmentSize > 0 {
		base, err := c.engine.AllocateManagedBufferPages(cfg.GlobalSegmentSize, cfg.HugePageSize)
		if err != nil {
			return fmt.Errorf("%w: segment of %d bytes: %v", kvstore.InvalidParams, cfg.GlobalSegmentSize, err)
		}
		seg := c.fleet.stamp(&pb.Segment{Id: newID(), Name: c.hostname, Base: uint64(base), Size: cfg.GlobalSegmentSize,
			TeEndpoint: c.engine.Name(), Protocol: "tcp", HostId: c.hostID, Incarnation: incarnation})
		ctx, cancel := rpcContext()
		defer cancel()
		resp, err := c.master.client().MountSegment(ctx, &pb.MountSegmentRequest{ClientId: c.id, Segment: seg})
		if err := rpcResult(resp.GetErrorCode(), err); err != nil {
			return fmt.Errorf("mount segment: %w", err)
		}
		c.segments = append(c.segments, seg)
	}
	c.lastPingOK.Store(true)
	return nil
}

// mapLocalBuffer maps size bytes of private memory for the local buffer;
// with hugePage > 0 on huge pages of that size (size rounded up to whole
// pages).
func mapLocalBuffer(size, hugePage uint64) ([]byte, error) {
	flags := unix.MAP_ANON | unix.MAP_PRIVATE
	if hugePage > 0 {
		flags |= unix.MAP_HUGETLB | hugepage.Shift(hugePage)<<unix.MAP_HUGE_SHIFT
		size = hugepage.RoundUp(size, hugePage)
	}
	buf, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil && hugePage > 0 {
		return nil, hugepage.Shortage(hugePage, size, err)
	}
	return buf, err
}

// Close shuts the client down (open → closing → closed): calls made from
// then on fail (InvalidParams, as upstream's calls on a closed client),
// calls already running finish (each is bounded by its RPC and transfer
// deadlines), then the client unmounts its segments and releases
// everything, the engine too when it started it. Objects whose only
// replicas lived here disappear. Safe to call twice, and concurrently.
func (c *Client) Close() error {
	c.life.Close(func() { close(c.stop) }, c.release)
	return nil
}

// errClientClosed is what calls on a closing or closed client return.
var errClientClosed = fmt.Errorf("%w: the store client is closed", kvstore.InvalidParams)

// release frees what the client holds once no call runs any more.
func (c *Client) release() {
	c.wg.Wait()
	if c.master != nil {
		c.closeFS()
		c.closeOffload()
	}
	c.StopMetricsServer()
	c.segMu.Lock()
	defer c.segMu.Unlock()
	if c.master != nil {
		c.reserved.releaseAll(c)
		for _, s := range c.segments {
			ctx, cancel := rpcContext()
			c.master.client().UnmountSegment(ctx, &pb.UnmountSegmentRequest{ClientId: c.id, SegmentId: s.Id})
			cancel()
		}
		c.master.close()
	}
	for _, s := range c.segments {
		c.releaseSegmentMemory(s)
	}
	if c.staging != nil {
		c.staging.close()
	}
	if c.local != nil {
		c.engine.UnregisterLocalMemory(gpu.AddrOf(c.local))
		unix.Munmap(c.local)
	}
	if c.ownsTE {
		c.engine.Close()
	}
}

// Health is upstream's health_check: 0 healthy, 1 closed, 2 master
// unreachable (the last heartbeat failed).
func (c *Client) Health() int {
	switch {
	case c.life.Closing():
		return NotInitialized
	case !c.lastPingOK.Load():
		return MasterUnreachable
	}
	return Healthy
}

// Hostname is the effective local hostname (host:port).
func (c *Client) Hostname() string { return c.hostname }

// Engine is the client's Transfer Engine.
func (c *Client) Engine() *transfer.Engine { return c.engine }

// heartbeat pings the master every second, remounts when asked to (after a
// master restart or leader change), runs the copy and move tasks the
// answer assigns, and follows a new HA leader after three failed pings.
func (c *Client) heartbeat() {
	defer c.wg.Done()
	t := time.NewTicker(heartbeatInterval)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		ctx, cancel := rpcContext()
		resp, err := c.master.client().Ping(ctx, &pb.PingRequest{ClientId: c.id, Incarnation: incarnation})
		cancel()
		if err != nil {
			failures++
			c.lastPingOK.Store(false)
			if failures >= 3 {
				if changed, err := c.master.reconnect(); err == nil && changed {
					slog.Info("store client: master changed, remounting", "master", c.master.leader)
				}
				failures = 0
			}
			continue
		}
		failures = 0
		c.lastPingOK.Store(true)
		if resp.GetClientStatus() == pb.ClientStatus_CLIENT_NEED_REMOUNT {
			c.remount()
		}
		c.runTasks(resp.GetTasks())
	}
}

func (c *Client) remount() {
	c.reserved.forget() // the master restarted: its blocks are gone
	// The metadata store may have restarted too (the master's embedded
	// HTTP one does): publish this client's TE segment again so that
	// peers can reach the remounted memory.
	if err := c.engine.Republish(); err != nil {
		slog.Warn("store client: republishing the transfer engine segment failed", "err", err)
	}
	c.segMu.Lock()
	segs := slices.Clone(c.segments)
	c.segMu.Unlock()
	ctx, cancel := rpcContext()
	defer cancel()
	resp, err := c.master.client().ReMountSegment(ctx, &pb.ReMountSegmentRequest{ClientId: c.id, Segments: segs})
	if err := rpcResult(resp.GetErrorCode(), err); err != nil {
		slog.Warn("store client: remount failed", "err", err)
		return
	}
	c.redrain()
	c.modes.reapply(c)
}

func rpcContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), rpcTimeout())
}

// rpcResult folds a call's transport error and domain code into one error.
func rpcResult(code int32, err error) error {
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %v", kvstore.RPCTimeout, err)
		}
		return fmt.Errorf("%w: %v", kvstore.RPCFail, err)
	}
	return kvstore.ErrorCode(code).Err()
}

// incarnation identifies this process's memory to the master: drawn once,
// at random and nonzero, it goes with every segment mounted and every
// ping. A restarted process draws another, which tells the master that the
// memory behind the old segments on the same endpoint is gone; the same
// one after a partition tells it that the replicas are still here.
var incarnation = newIncarnation()

func newIncarnation() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newSecret draws a client secret: 32 random bytes in hex. It is drawn
// with the client id and never leaves the process but to the master.
func newSecret() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startEngine starts the client's own Transfer Engine as c.hostname. A
// port effectiveHostname picked is only free, not held: another client of
// the same metadata server may have registered the same name (and let the
// port go), which the HTTP metadata server refuses. Such a name is picked
// again, up to nameRetries times.
func (c *Client) startEngine(cfg Config) (*transfer.Engine, error) {
	_, _, noPort := net.SplitHostPort(cfg.LocalHostname)
	picked := noPort != nil // the port is effectiveHostname's to pick again
	for attempt := 0; ; attempt++ {
		e, err := transfer.New(transfer.Config{LocalHostname: c.hostname, MetadataServer: cfg.MetadataServer,
			Protocol: cfg.Protocol, DeviceName: cfg.DeviceName})
		if err == nil || !picked || attempt == nameRetries || !errors.Is(err, metadata.ErrNameTaken) {
			return e, err
		}
		slog.Info("store client: segment name taken, picking another port", "name", c.hostname)
		if c.hostname, err = effectiveHostname(cfg.LocalHostname); err != nil {
			return nil, err
		}
	}
}

// nameRetries is how many other ports startEngine tries.
const nameRetries = 5

// pickPort draws a port in [lo, hi] (a variable for tests).
var pickPort = func(lo, hi int) int { return lo + mrand.IntN(hi-lo+1) }

// effectiveHostname adds a free port in [MC_STORE_CLIENT_MIN_PORT,
// MC_STORE_CLIENT_MAX_PORT] to a hostname given without one.
func effectiveHostname(h string) (string, error) {
	if _, _, err := net.SplitHostPort(h); err == nil {
		return h, nil
	}
	lo := envvars.StoreClientMinPort.Int(12300)
	hi := max(envvars.StoreClientMaxPort.Int(14300), lo)
	tries := envvars.StoreClientSetupRetries.Int(20)
	for range max(tries, 1) {
		port := strconv.Itoa(pickPort(lo, hi))
		if ln, err := net.Listen("tcp", net.JoinHostPort(h, port)); err == nil {
			ln.Close()
			return net.JoinHostPort(h, port), nil
		}
	}
	return "", fmt.Errorf("%w: no free port for %s in [%d,%d]", kvstore.InvalidParams, h, lo, hi)
}
