package standalone

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/internal/envvars"
	"github.com/mooncake-go/mooncake/internal/lifecycle"
	"github.com/mooncake-go/mooncake/kvstore"
	"github.com/mooncake-go/mooncake/kvstore/client"
	"github.com/mooncake-go/mooncake/kvstore/hotcache"
	"github.com/mooncake-go/mooncake/kvstore/ipc"
)

// DummyConfig is what setup_dummy takes.
type DummyConfig struct {
	// ServerAddress is the daemon's "host:port": port is its --port, which
	// names its socket; host must be this machine (the daemon maps this
	// process's memory).
	ServerAddress string
	// LocalBufferSize bytes of shared memory stage the calls whose memory
	// is not in a registered region (0: such calls fail).
	LocalBufferSize uint64
	// Scope is the worker scope (hot cache domain); required.
	Scope string
	// Keyspace, when set, must be the daemon's.
	Keyspace string
}

// dialTimeout bounds connecting to the daemon.
const dialTimeout = 5 * time.Second

// Dummy is a dummy client: every call runs on the daemon. Methods are safe
// for concurrent use and have the real client's signatures and results.
type Dummy struct {
	cfg    DummyConfig
	socket string
	life   lifecycle.Gate

	connMu sync.Mutex // link and the (re)connect sequence
	link   *link      // the connection calls use; nil before the first

	linkMu sync.Mutex          // links
	links  map[*ipc.Conn]*link // every connection calls may still wait on

	viewMu  sync.RWMutex // readers of the mapped hot cache hold it shared
	view    *hotcache.View
	viewMap *ipc.Region

	regMu   sync.Mutex
	regions []*region // registered with the daemon, replayed on reconnect
	pool    []*region // made here (local buffer, alloc_from_mem_pool)

	local *region
	arena *client.Arena

	calls, failures, reconnects atomic.Uint64
}

// NewDummy connects to the daemon, passes it the local buffer and maps the
// scope's hot cache when the daemon shares it.
func NewDummy(cfg DummyConfig) (*Dummy, error) {
	host, portText, err := net.SplitHostPort(cfg.ServerAddress)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || port <= 0 || port > 65535 {
		return nil, fmt.Errorf("%w: server_address %q: want host:port", kvstore.InvalidParams, cfg.ServerAddress)
	}
	if !isLocalHost(host) {
		return nil, fmt.Errorf("%w: server_address %q: a dummy client shares memory with its mooncake_client, which must run on this host",
			kvstore.InvalidParams, cfg.ServerAddress)
	}
	if cfg.Scope == "" {
		return nil, fmt.Errorf("%w: a dummy client needs a worker scope", kvstore.InvalidParams)
	}
	d := &Dummy{cfg: cfg, socket: ipc.SocketName(port)}
	if cfg.LocalBufferSize > 0 {
		r, err := d.newPoolRegion("mooncake_dummy_local", cfg.LocalBufferSize)
		if err != nil {
			return nil, fmt.Errorf("%w: local buffer: %v", kvstore.InvalidParams, err)
		}
		d.local, d.arena = r, client.NewArena(r.own.Mem)
		d.regions = append(d.regions, r)
	}
	d.connMu.Lock()
	_, err = d.connectLocked()
	d.connMu.Unlock()
	if err != nil {
		d.releaseMemory()
		return nil, err
	}
	return d, nil
}

// isLocalHost reports whether host names this machine.
func isLocalHost(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// connected returns a live connection, reconnecting once if the last one
// ended; the caller does not hold connMu.
func (d *Dummy) connected() (*ipc.Conn, error) {
	d.connMu.Lock()
	defer d.connMu.Unlock()
	return d.connectedLocked()
}

// connectedLocked is connected for a caller that holds connMu.
func (d *Dummy) connectedLocked() (*ipc.Conn, error) {
	if l := d.link; l != nil && l.usable() {
		return l.conn, nil
	}
	d.reconnects.Add(1)
	return d.connectLocked()
}

// connectLocked dials the daemon, says hello, installs every region
// again and maps the hot cache; the caller holds connMu. The connection
// it replaces has ended (or is ending, see link.end) and is closed.
func (d *Dummy) connectLocked() (*ipc.Conn, error) {
	if old := d.link; old != nil {
		// Calls may still wait on it (and end it themselves): end it as
		// they would, without making this call wait.
		d.link = nil
		go old.end(releaseGrace)
	}
	uc, err := ipc.Dial(d.socket, dialTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: connect to mooncake_client at %s (socket %s): %v", kvstore.RPCFail, d.cfg.ServerAddress, d.socket[1:], err)
	}
	if err := d.checkDaemon(uc); err != nil {
		uc.Close()
		return nil, err
	}
	conn, err := ipc.NewConn(uc, nil)
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("%w: %v", kvstore.RPCFail, err)
	}
	hold, err := conn.Hold()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: %v", kvstore.RPCFail, err)
	}
	l := &link{conn: conn, hold: hold, done: func() { d.forget(conn) }}
	// Nothing on a connection that is not in use yet reaches this
	// dummy's memory (hello, register, hot_cache): closing it is enough.
	fail := func(err error) (*ipc.Conn, error) { l.close(); return nil, err }
	resp, err := d.callOn(conn, request{Op: opHello, Scope: d.cfg.Scope, Keyspace: d.cfg.Keyspace}, nil)
	if err != nil {
		return fail(err)
	}
	if err := resp.err(); err != nil {
		return fail(err)
	}
	d.regMu.Lock()
	regions := append([]*region(nil), d.regions...)
	d.regMu.Unlock()
	for _, r := range regions {
		if err := d.install(conn, r); err != nil {
			return fail(err)
		}
	}
	if resp.Block > 0 {
		d.mapHotCache(conn)
	}
	d.link = l
	d.linkMu.Lock()
	if d.links == nil {
		d.links = map[*ipc.Conn]*link{}
	}
	d.links[conn] = l
	d.linkMu.Unlock()
	go d.watch(conn)
	return conn, nil
}

// linkOf is the link of conn while a call may wait on it; nil for a
// connection that is not in use yet (connectLocked) or that has ended
// (link.end or link.close is over).
func (d *Dummy) linkOf(conn *ipc.Conn) *link {
	d.linkMu.Lock()
	defer d.linkMu.Unlock()
	return d.links[conn]
}

func (d *Dummy) forget(conn *ipc.Conn) {
	d.linkMu.Lock()
	delete(d.links, conn)
	d.linkMu.Unlock()
}

// watch stops reading the hot cache as soon as the daemon is gone: its
// memory no longer receives invalidations.
func (d *Dummy) watch(conn *ipc.Conn) {
	<-conn.Done()
	d.dropHotCache()
}

func (d *Dummy) mapHotCache(conn *ipc.Conn) {
	msg, err := d.raw(conn, request{Op: opHotCache}, nil)
	if err != nil {
		return
	}
	var resp response
	if json.Unmarshal(msg.Body, &resp) != nil || resp.Code != 0 || len(msg.FDs) != 1 {
		closeAll(msg.FDs)
		slog.Debug("dummy client: the hot cache is not shared; reads ask the daemon", "reason", resp.Message)
		return
	}
	m, err := ipc.MapFD(msg.FDs[0], 0, uint64(resp.Count), false)
	if err != nil {
		closeAll(msg.FDs)
		slog.Warn("dummy client: cannot map the hot cache", "err", err)
		return
	}
	v, err := hotcache.NewView(m.Mem)
	if err != nil {
		m.Close()
		slog.Warn("dummy client: cannot read the hot cache", "err", err)
		return
	}
	d.dropHotCache()
	d.viewMu.Lock()
	d.view, d.viewMap = v, m
	d.viewMu.Unlock()
}

func (d *Dummy) dropHotCache() {
	d.viewMu.Lock()
	defer d.viewMu.Unlock()
	if d.viewMap != nil {
		d.viewMap.Close()
	}
	d.view, d.viewMap = nil, nil
}

// callTimeout bounds one call: a master RPC and a transfer may both run
// inside it.
func callTimeout() time.Duration {
	return time.Duration(envvars.RPCTimeoutMs.Int(10000))*time.Millisecond + envvars.TransferTimeout.Duration(30*time.Second)
}

// raw sends req on conn and returns the reply as it came. A call that
// gets no reply (its deadline passed, or the connection ended) returns
// only once the daemon has confirmed that nothing it still runs can write
// this dummy's memory, or after releaseGrace without that confirmation
// (see link.end).
func (d *Dummy) raw(conn *ipc.Conn, req request, fds []int) (ipc.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout())
	defer cancel()
	msg, err := conn.Call(ctx, ipc.Message{Body: encode(req), FDs: fds})
	if errors.Is(err, ipc.ErrTooLarge) {
		return msg, fmt.Errorf("%w: %v (split the batch)", kvstore.InvalidParams, err)
	}
	if err == nil {
		return msg, nil
	}
	unconfirmed := ""
	if l := d.linkOf(conn); l != nil && !l.end(releaseGrace) {
		unconfirmed = fmt.Sprintf("; it did not confirm within %v that it stopped using this process's memory "+
			"(a stopped mooncake_client that resumes may still complete a copy into it)", releaseGrace)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return msg, fmt.Errorf("%w: mooncake_client did not answer %s in time%s", kvstore.RPCTimeout, req.Op, unconfirmed)
	}
	return msg, fmt.Errorf("%w: mooncake_client: %v%s", kvstore.RPCFail, err, unconfirmed)
}

func (d *Dummy) callOn(conn *ipc.Conn, req request, fds []int) (response, error) {
	msg, err := d.raw(conn, req, fds)
	if err != nil {
		return response{}, err
	}
	closeAll(msg.FDs)
	var resp response
	if err := json.Unmarshal(msg.Body, &resp); err != nil {
		return response{}, fmt.Errorf("%w: malformed reply from mooncake_client: %v", kvstore.RPCFail, err)
	}
	return resp, nil
}

// call runs req on the daemon: transport failures are errors (RPC_FAIL,
// RPC_TIMEOUT); the reply's own code is the caller's to read.
func (d *Dummy) call(req request) (response, error) {
	d.calls.Add(1)
	conn, err := d.connected()
	if err == nil {
		var resp response
		if resp, err = d.callOn(conn, req, nil); err == nil {
			return resp, nil
		}
	}
	d.failures.Add(1)
	return response{}, err
}

// err is the reply's own code as an error.
func (r response) err() error {
	if r.Code == 0 {
		return nil
	}
	if r.Message != "" {
		return fmt.Errorf("%w: %s", kvstore.ErrorCode(r.Code), r.Message)
	}
	return kvstore.ErrorCode(r.Code)
}

// Health is upstream's health_check for a dummy: 0 healthy, 1 closed, 2
// the daemon unreachable or its own master link unhealthy.
func (d *Dummy) Health() int {
	if !d.life.Enter() {
		return client.NotInitialized
	}
	defer d.life.Exit()
	resp, err := d.call(request{Op: opHealth})
	if err != nil || resp.Code != 0 {
		return client.MasterUnreachable
	}
	if resp.Health != client.Healthy {
		return client.MasterUnreachable
	}
	return client.Healthy
}

// Hostname is "" for a dummy (upstream): it has no place in the cluster.
func (d *Dummy) Hostname() string { return "" }

// Close ends the dummy: calls made from then on fail, running ones
// finish, the daemon unmaps this dummy's regions (it sees the connection
// end) and the memory made here is freed. Safe to call twice.
func (d *Dummy) Close() error {
	d.life.Close(nil, func() {
		d.connMu.Lock()
		if d.link != nil {
			d.link.close() // no call runs any more
			d.link = nil
		}
		d.connMu.Unlock()
		d.dropHotCache()
		d.releaseMemory()
	})
	return nil
}
