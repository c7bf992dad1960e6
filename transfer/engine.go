package transfer

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/lifecycle"
	"github.com/mooncake-go/mooncake/internal/netaddr"
	"github.com/mooncake-go/mooncake/transfer/handshake"
	"github.com/mooncake-go/mooncake/transfer/hugepage"
	"github.com/mooncake-go/mooncake/transfer/metadata"
	"github.com/mooncake-go/mooncake/transfer/shm"
	"github.com/mooncake-go/mooncake/transfer/tcp"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// SegmentHandle names a remote segment: Segment.Handle of an OpenSegment
// reference, or the engine's own from CachedSegment.
type SegmentHandle uint64

// Engine is one process's Transfer Engine. All methods are safe for
// concurrent use.
type Engine struct {
	cfg  Config
	mem  *gpu.Memory // cfg.Memory
	name string      // local segment name
	host string      // host peers use to reach this engine
	p2p  bool
	dir  metadata.Directory
	// handshakeMax bounds a handshake frame (MC_HANDSHAKE_MAX_LENGTH).
	handshakeMax uint64
	// transports are the ways to reach peers, the preferred first: shm
	// (unless disabled), then tcp. A request runs on the first whose
	// connection to its segment carries its range.
	transports []transport.Transport

	reg    registry
	ctl    *shm.Buffer // control page: registry version for same-host peers
	rpcLn  net.Listener
	dataLn net.Listener
	rpcSrv *handshake.Server
	tcpSrv *tcp.Server
	// life admits calls while the engine is open; Close waits for them.
	life lifecycle.Gate
	// ctlMu orders uses of the control page (ctl) against Close unmapping
	// it: a handshake served while the engine closes must not touch it.
	ctlMu     sync.Mutex
	ctlClosed bool
	// Test-only injected link failures (faultinject.go), by peer name;
	// anyBroken: the map is not empty.
	faultMu     sync.Mutex
	brokenLinks map[string]bool
	anyBroken   atomic.Bool

	segMu     sync.Mutex
	segs      map[string]*remoteSegment
	segByID   map[SegmentHandle]*remoteSegment
	nextSeg   SegmentHandle
	batchMu   sync.Mutex
	batches   map[BatchID]*batch
	nextBat   BatchID
	notifyMu  sync.Mutex
	notifies  []Notify
	publishMu sync.Mutex // serialises descriptor publication
	// nameTaken: the metadata server refused this engine's name (another
	// engine holds it), so closing must not withdraw that engine's keys.
	nameTaken bool
}

// New starts an engine: it opens the listeners, connects the metadata
// backend and publishes the (empty) local segment.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withEnv()
	proto, warning, err := resolveProtocol(cfg.Protocol, cfg.DeviceName, cfg.ForceTCP)
	if err != nil {
		return nil, err
	}
	if warning != "" {
		slog.Warn("transfer: " + warning)
	}
	cfg.Protocol = proto
	if cfg.Secret == nil {
		if cfg.Secret, err = tcp.LoadSecret(); err != nil {
			return nil, errorf(CodeInvalidArgument, err, "TE cluster secret")
		}
	} else if len(cfg.Secret) < tcp.MinSecretLen {
		return nil, errorf(CodeInvalidArgument, nil, "TE cluster secret of %d bytes: want at least %d", len(cfg.Secret), tcp.MinSecretLen)
	}
	conn, err := metadata.ParseConn(cfg.MetadataServer)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(cfg.LocalHostname)
	if err != nil {
		host = cfg.LocalHostname
	}
	if host == "" {
		return nil, errorf(CodeInvalidArgument, nil, "empty local hostname")
	}
	if err := netaddr.Unreachable(host, conn.Host(), "local_hostname"); err != nil {
		return nil, errorf(CodeInvalidArgument, nil, "metadata server %s: %v", cfg.MetadataServer, err)
	}
	e := &Engine{
		cfg:          cfg,
		mem:          cfg.Memory,
		name:         cfg.LocalHostname,
		host:         host,
		p2p:          conn.Kind == "p2p",
		handshakeMax: uint64(envvars.HandshakeMaxLength.Int(defaultHandshakeMaxLength)),
		segs:         map[string]*remoteSegment{},
		segByID:      map[SegmentHandle]*remoteSegment{},
		batches:      map[BatchID]*batch{},
	}
	bind := cfg.BindAddress
	if bind == "" && net.ParseIP(host) != nil {
		bind = host
	}
	if e.rpcLn, err = listenRPC(bind); err != nil {
		return nil, err
	}
	if e.dataLn, err = net.Listen("tcp", net.JoinHostPort(bind, "0")); err != nil {
		e.rpcLn.Close()
		return nil, errorf(CodeSocket, err, "listen data port")
	}
	e.rpcSrv = handshake.NewServer(e.rpcLn, e.handshakeMax, e.descriptorJSON, e.queueNotify)
	e.tcpSrv = tcp.NewServer(e.dataLn, &e.reg, e.mem, cfg.TransferTimeout, cfg.Secret)
	if _, _, err := net.SplitHostPort(cfg.LocalHostname); err != nil || e.p2p {
		// P2P names are host:rpc_port by definition; a bare host gets the
		// same so that engines sharing a host never share a name.
		e.name = net.JoinHostPort(host, strconv.Itoa(e.RPCPort()))
	}
	if !cfg.ForceTCP {
		if e.ctl, err = shm.NewBuffer(uint64(os.Getpagesize()), 0); err != nil {
			slog.Warn("transfer: shared memory unavailable, using tcp only", "err", err)
		} else {
			e.transports = append(e.transports, shm.NewTransport(e.mem))
		}
	}
	e.transports = append(e.transports, tcp.NewTransport(cfg.LanesPerPeer, e.mem, cfg.Secret))
	if e.dir, err = openDirectory(conn, e.handshakeTimeout(), e.handshakeMax); err != nil {
		e.stopServing()
		if e.ctl != nil {
			e.ctl.Close()
		}
		return nil, err
	}
	go e.rpcSrv.Serve()
	go e.tcpSrv.Serve()
	if err := e.publish(); err != nil {
		e.nameTaken = errors.Is(err, metadata.ErrNameTaken)
		e.Close()
		return nil, err
	}
	slog.Debug("transfer: engine up", "segment", e.name, "rpc_port", e.RPCPort(), "data", e.dataLn.Addr(), "shm", e.ctl != nil)
	return e, nil
}

// listenRPC binds the handshake listener on a random port in
// [MC_MIN_RPC_PORT, MC_MAX_RPC_PORT] (default 15000-17000).
func listenRPC(bind string) (net.Listener, error) {
	lo := envvars.MinRPCPort.Int(defaultMinRPCPort)
	hi := envvars.MaxRPCPort.Int(defaultMaxRPCPort)
	if hi < lo {
		hi = lo
	}
	var err error
	for range 64 {
		port := lo + rand.IntN(hi-lo+1)
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(port))); err == nil {
			return ln, nil
		}
	}
	return nil, errorf(CodeSocket, err, "no free rpc port in [%d,%d]", lo, hi)
}

// openDirectory opens the metadata backend that conn names.
func openDirectory(conn metadata.Conn, handshakeTimeout time.Duration, handshakeMax uint64) (metadata.Directory, error) {
	if conn.Kind == "p2p" {
		return metadata.P2P{Timeout: handshakeTimeout, MaxFrame: handshakeMax}, nil
	}
	store, err := metadata.Open(conn)
	if err != nil {
		return nil, err
	}
	return metadata.NewStoreDirectory(store, metadata.ClusterID()), nil
}

// publish stores where this engine's handshake listener is and its
// descriptor.
func (e *Engine) publish() error {
	e.publishMu.Lock()
	defer e.publishMu.Unlock()
	b, err := e.descriptorJSON()
	if err != nil {
		return err
	}
	return e.dir.Publish(e.name, metadata.RPCMeta{Host: e.host, RPCPort: e.RPCPort()}, b)
}

// Name is the local segment name peers open this engine by.
func (e *Engine) Name() string { return e.name }

// RPCPort is the handshake listener's port.
func (e *Engine) RPCPort() int { return e.rpcLn.Addr().(*net.TCPAddr).Port }

// handshakeTimeout bounds one handshake: 5 s, or less when transfers must
// fail sooner.
func (e *Engine) handshakeTimeout() time.Duration {
	return min(defaultHandshakeTimeout, e.cfg.TransferTimeout)
}

// Timeout is the per-transfer timeout in force.
func (e *Engine) Timeout() time.Duration { return e.cfg.TransferTimeout }

// Close shuts the engine down: open → closing → closed. From the moment it
// starts, every call that would start work fails with ErrClosed. It stops
// serving peers at once (listeners and every accepted connection are
// closed, so a peer's request in flight fails and later ones cannot reach
// this engine) and cuts its own connections to peers (queued and in-flight
// transfers, a synchronous one on a caller's thread included, end FAILED
// or CANCELED), waits for the calls already running, cancels what they
// started, withdraws the
// published metadata, and unregisters all memory, user-registered and
// managed, after the transfers using it have ended; only then are managed
// buffers freed. Concurrent and later calls wait for the first to finish.
func (e *Engine) Close() error {
	e.life.Close(e.stopServing, e.release)
	return nil
}

// stopServing cuts peers off (no new connection, and none that was
// accepted stays open) and cuts this engine's own connections to them, so
// that a transfer waiting for a peer ends now: queued and in-flight ones,
// and a synchronous one waiting on the caller's thread, whose call Close
// would otherwise wait for until its deadline.
func (e *Engine) stopServing() {
	e.rpcSrv.Close()
	e.tcpSrv.Close()
	e.segMu.Lock()
	segs := make([]*remoteSegment, 0, len(e.segs))
	for _, s := range e.segs {
		segs = append(segs, s)
	}
	e.segMu.Unlock()
	for _, s := range segs {
		s.close()
	}
}

// release frees what the engine holds once no call runs any more.
func (e *Engine) release() {
	e.segMu.Lock()
	segs := e.segs
	e.segs, e.segByID = map[string]*remoteSegment{}, map[SegmentHandle]*remoteSegment{}
	e.segMu.Unlock()
	for _, s := range segs {
		s.close() // cancels queued slices and cuts those in flight
	}
	if !e.nameTaken {
		e.dir.Withdraw(e.name)
	}
	e.dir.Close()
	e.bumpVersion()
	for _, r := range e.reg.snapshot() {
		// remove waits for the transfers using the region.
		if _, err := e.reg.remove(r.addr); err == nil && r.shm != nil {
			r.shm.Close()
		}
	}
	if e.ctl != nil {
		e.ctlMu.Lock()
		e.ctlClosed = true
		e.ctl.Close()
		e.ctlMu.Unlock()
	}
}

// enter admits one call that starts work, or returns ErrClosed (wrapped,
// code CodeContext) naming what was refused. A nil error must be paired
// with e.life.Exit.
func (e *Engine) enter(what string) error {
	if !e.life.Enter() {
		return closedError(what)
	}
	return nil
}

// refuseClosed is enter for calls that touch no local memory (handshakes
// with a peer): they are refused once Close has begun, and Close does not
// wait for them.
func (e *Engine) refuseClosed(what string) error {
	if e.life.Closing() {
		return closedError(what)
	}
	return nil
}

func closedError(what string) error { return errorf(CodeContext, ErrClosed, "%s", what) }

// descriptor builds the local segment descriptor.
func (e *Engine) descriptor() *SegmentDesc {
	d := &SegmentDesc{
		Name:            e.name,
		Protocol:        "tcp",
		TCPDataPort:     e.dataLn.Addr().(*net.TCPAddr).Port,
		TCPProtoVersion: tcp.ProtoVersion,
		Timestamp:       time.Now().UTC().Format(time.RFC3339Nano),
		Buffers:         []BufferDesc{},
	}
	if e.ctl != nil {
		e.ctlMu.Lock()
		if !e.ctlClosed {
			d.HostID, d.PID = shm.HostID(), os.Getpid()
			d.CtlFD, d.CtlInode = e.ctl.FD, e.ctl.Inode
			d.Version = e.ctl.Version().Load()
		}
		e.ctlMu.Unlock()
	}
	for i, r := range e.reg.inOrder() {
		if r.localOnly {
			continue
		}
		b := BufferDesc{Name: fmt.Sprintf("%s@%d", r.location, i), Addr: uint64(r.addr), Length: r.length}
		if r.shm != nil && e.ctl != nil {
			b.ShmFD, b.ShmInode = r.shm.FD, r.shm.Inode
		}
		d.Buffers = append(d.Buffers, b)
	}
	return d
}

func (e *Engine) descriptorJSON() ([]byte, error) { return json.Marshal(e.descriptor()) }

// publishDescriptor stores the current descriptor in the metadata backend
// (P2P peers fetch it on demand instead).
func (e *Engine) publishDescriptor() error {
	e.publishMu.Lock()
	defer e.publishMu.Unlock()
	b, err := e.descriptorJSON()
	if err != nil {
		return err
	}
	return e.dir.PublishDescriptor(e.name, b)
}

// RegisterLocalMemory makes [addr, addr+length) reachable by peers.
// location is a placement hint ("*", "cpu:0", ...) kept in the buffer name;
// device memory registered as "*" is named "cuda:N". Device memory must lie
// inside one CUDA allocation.
func (e *Engine) RegisterLocalMemory(addr uintptr, length uint64, location string) error {
	return e.BatchRegisterLocalMemory([]uintptr{addr}, []uint64{length}, location)
}

// BatchRegisterLocalMemory registers several buffers and publishes once.
// On error nothing stays registered.
func (e *Engine) BatchRegisterLocalMemory(addrs []uintptr, lengths []uint64, location string) error {
	if err := e.enter("register memory"); err != nil {
		return err
	}
	defer e.life.Exit()
	if len(addrs) != len(lengths) {
		return errorf(CodeInvalidArgument, nil, "%d addresses, %d lengths", len(addrs), len(lengths))
	}
	if location == "" {
		location = "*"
	}
	for i := range addrs {
		dev, err := e.classify(addrs[i], lengths[i])
		if err == nil {
			err = e.reg.add(&region{addr: addrs[i], length: lengths[i], location: deviceLocation(location, dev), placement: dev})
		}
		if err != nil {
			for _, a := range addrs[:i] {
				e.reg.remove(a)
			}
			return err
		}
	}
	return e.publishDescriptor()
}

// RegisterLocalOnly registers [addr, addr+length) as the local side of
// transfers only (upstream's remote_accessible=false): nothing is published
// and peers cannot reach it, so it is cheap enough to do per operation.
// Release it with UnregisterLocalMemory.
func (e *Engine) RegisterLocalOnly(addr uintptr, length uint64) error {
	if err := e.enter("register memory"); err != nil {
		return err
	}
	defer e.life.Exit()
	dev, err := e.classify(addr, length)
	if err != nil {
		return err
	}
	return e.reg.add(&region{addr: addr, length: length, location: "local", localOnly: true, placement: dev})
}

// IsRegistered reports whether [addr, addr+length) lies inside one
// registered buffer, so it can be the local side of a transfer.
func (e *Engine) IsRegistered(addr uintptr, length uint64) bool {
	return e.reg.find(addr, length) != nil
}

// Span is one registered buffer: Length bytes at Addr.
type Span struct {
	Addr   uintptr
	Length uint64
}

// Overlapping returns the registered buffers (local-only ones included)
// that share a byte with [addr, addr+n), in address order. A caller about
// to write a range into local memory uses it to refuse a range that starts
// or ends inside a buffer it does not lie wholly inside.
func (e *Engine) Overlapping(addr uintptr, n uint64) []Span {
	rs := e.reg.overlapping(addr, n)
	out := make([]Span, len(rs))
	for i, r := range rs {
		out[i] = Span{r.addr, r.length}
	}
	return out
}

// UnregisterLocalMemory withdraws the buffer registered at addr, after the
// transfers using it finish.
func (e *Engine) UnregisterLocalMemory(addr uintptr) error {
	return e.BatchUnregisterLocalMemory([]uintptr{addr})
}

// BatchUnregisterLocalMemory withdraws several buffers and publishes once.
// It unregisters every listed buffer it can and reports the first error.
func (e *Engine) BatchUnregisterLocalMemory(addrs []uintptr) error {
	if err := e.enter("unregister memory"); err != nil {
		return err
	}
	defer e.life.Exit()
	var first error
	published := false
	for _, a := range addrs {
		r, err := e.reg.remove(a)
		if err != nil {
			first = firstErr(first, err)
			continue
		}
		published = published || !r.localOnly
		if r.shm != nil {
			e.bumpVersion()
			r.shm.Close()
		}
	}
	if !published {
		return first
	}
	return firstErr(first, e.publishDescriptor())
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// bumpVersion tells same-host peers that cached descriptors are stale.
func (e *Engine) bumpVersion() {
	if e.ctl != nil {
		e.ctlMu.Lock()
		if !e.ctlClosed {
			e.ctl.Version().Add(1)
		}
		e.ctlMu.Unlock()
	}
}

// AllocateManagedBuffer allocates and registers length bytes that
// same-host peers can map (memfd backed), so transfers into it are memcpy.
func (e *Engine) AllocateManagedBuffer(length uint64) (uintptr, error) {
	return e.AllocateManagedBufferPages(length, 0)
}

// AllocateManagedBufferPages is AllocateManagedBuffer on huge pages of
// hugePage bytes (hugepage.Size2MB or Size1GB; 0 for normal pages). The
// buffer is length rounded up to whole pages; with too few huge pages
// reserved it fails with hugepage.Shortage's error.
func (e *Engine) AllocateManagedBufferPages(length, hugePage uint64) (uintptr, error) {
	if err := e.enter("allocate managed buffer"); err != nil {
		return 0, err
	}
	defer e.life.Exit()
	if length == 0 {
		return 0, errorf(CodeInvalidArgument, nil, "zero-length buffer")
	}
	if hugePage != 0 && !hugepage.Valid(hugePage) {
		return 0, errorf(CodeInvalidArgument, nil, "huge page size %d: want 2 MiB or 1 GiB", hugePage)
	}
	b, err := shm.NewBuffer(length, hugePage)
	if err != nil {
		return 0, err
	}
	if err := e.reg.add(&region{addr: b.Addr(), length: b.Len(), location: "cpu", shm: b}); err != nil {
		b.Close()
		return 0, err
	}
	if err := e.publishDescriptor(); err != nil {
		e.reg.remove(b.Addr())
		b.Close()
		return 0, err
	}
	return b.Addr(), nil
}

// FreeManagedBuffer unregisters and frees a buffer from AllocateManagedBuffer.
func (e *Engine) FreeManagedBuffer(addr uintptr) error {
	r := e.reg.find(addr, 1)
	if r == nil || r.addr != addr || r.shm == nil {
		return errorf(CodeAddressNotRegistered, nil, "%#x is not a managed buffer", addr)
	}
	return e.UnregisterLocalMemory(addr)
}

// queueNotify stores a received notification for GetNotifies.
func (e *Engine) queueNotify(n Notify) {
	e.notifyMu.Lock()
	e.notifies = append(e.notifies, n)
	e.notifyMu.Unlock()
}

// GetNotifies returns and clears the notifications received so far.
func (e *Engine) GetNotifies() []Notify {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	n := e.notifies
	e.notifies = nil
	return n
}

// SendNotify delivers n to the segment named target.
func (e *Engine) SendNotify(target string, n Notify) error {
	if err := e.refuseClosed("send notify"); err != nil {
		return err
	}
	s, err := e.openSegment(target)
	if err != nil {
		return err
	}
	payload, _ := json.Marshal(n)
	_, err = s.call(handshake.FrameNotify, payload)
	return err
}

// Probe checks that the segment named target answers its handshake port.
func (e *Engine) Probe(target string) error {
	if err := e.refuseClosed("probe"); err != nil {
		return err
	}
	if err := e.linkBroken(target); err != nil {
		return err
	}
	// A same-host peer that has begun to exit fails the probe at once,
	// before a handshake: its port may still take the connection while its
	// process is torn down, and nothing will answer there again.
	s, err := e.acquire(target, true)
	if err != nil {
		return err
	}
	if s.peerGone() {
		return errorf(CodeSocket, nil, "probe of %s: the peer's process exited", target)
	}
	if _, err := s.current(); err != nil {
		return err
	}
	reply, err := s.call(handshake.FrameProbe, []byte("{}"))
	if err != nil {
		return err
	}
	var r struct{ Status string }
	if json.Unmarshal(reply, &r) != nil || r.Status != "success" {
		return errorf(CodeRejectHandshake, nil, "probe of %s answered %q", target, reply)
	}
	return nil
}

// WriteLocal copies src into this engine's registered memory at addr. It
// fails, touching nothing, unless the whole range is registered.
func (e *Engine) WriteLocal(addr uintptr, src []byte) error {
	if err := e.enter("write local memory"); err != nil {
		return err
	}
	defer e.life.Exit()
	r := e.reg.acquire(addr, uint64(len(src)))
	if r == nil {
		return errorf(CodeAddressNotRegistered, nil, "[%#x,+%d) is not registered", addr, len(src))
	}
	defer r.Release()
	return e.move(OpWrite, gpu.AddrOf(src), false, addr, r.placement.Device, uint64(len(src)))
}

// ReadLocal copies len(dst) bytes of this engine's registered memory at addr
// into dst, failing unless the whole range is registered.
func (e *Engine) ReadLocal(addr uintptr, dst []byte) error {
	if err := e.enter("read local memory"); err != nil {
		return err
	}
	defer e.life.Exit()
	r := e.reg.acquire(addr, uint64(len(dst)))
	if r == nil {
		return errorf(CodeAddressNotRegistered, nil, "[%#x,+%d) is not registered", addr, len(dst))
	}
	defer r.Release()
	return e.move(OpRead, gpu.AddrOf(dst), false, addr, r.placement.Device, uint64(len(dst)))
}
