package transfer

import (
	"time"

	"github.com/mooncake-go/mooncake/gpu"
	"github.com/mooncake-go/mooncake/internal/envvars"
)

// Defaults, as upstream.
const (
	defaultTransferTimeout    = 30 * time.Second
	defaultHandshakeMaxLength = 1 << 20
	defaultHandshakeTimeout   = 5 * time.Second
	defaultLanesPerPeer       = 4
	defaultMinRPCPort         = 15000
	defaultMaxRPCPort         = 17000
)

// Config configures an Engine. The zero value of every field means "take
// the upstream environment variable, else the upstream default".
type Config struct {
	// LocalHostname gives the host peers use to reach this engine, and
	// names its segment: "host:port" is used as the name as is (non-P2P
	// modes); a bare "host", and every name in P2P mode, becomes
	// "host:<rpc_port>".
	LocalHostname string
	// MetadataServer is a connection string accepted by ParseMetadataConn.
	MetadataServer string
	// Protocol is the transport protocol asked for: "tcp" (or ""), or
	// "rdma"/"efa", which resolve to TCP in this build (resolveProtocol).
	Protocol string
	// DeviceName lists the RDMA devices an "rdma" protocol should use
	// ("mlx5_0,mlx5_1"); "" or "auto-discovery" means any.
	DeviceName string
	// TransferTimeout bounds every transfer (MC_TRANSFER_TIMEOUT, seconds).
	TransferTimeout time.Duration
	// ForceTCP disables the shared-memory transport (MC_FORCE_TCP).
	ForceTCP bool
	// BindAddress is the IP the listeners bind to (MC_TCP_BIND_ADDRESS);
	// default: the host of LocalHostname when it is an IP, else all.
	BindAddress string
	// LanesPerPeer bounds concurrent TCP connections to one peer
	// (MC_TCP_LANES_PER_PEER).
	LanesPerPeer int
	// Memory tells device memory from host memory and moves device
	// memory; nil means gpu.System() (the CUDA driver when present).
	Memory *gpu.Memory
	// Secret is the cluster secret TCP peers must prove they hold
	// (docs/security.md, "Authenticated TE peers"); nil means
	// MC_TE_SECRET_FILE or MC_TE_SECRET, else none (upstream: peers are
	// not authenticated).
	Secret []byte
}

// withEnv fills zero fields from the environment and defaults.
func (c Config) withEnv() Config {
	if c.TransferTimeout == 0 {
		c.TransferTimeout = envvars.TransferTimeout.Duration(defaultTransferTimeout)
	}
	if !c.ForceTCP {
		c.ForceTCP = envvars.ForceTCP.Enabled()
	}
	if c.BindAddress == "" {
		c.BindAddress = envvars.TCPBindAddress.Value()
	}
	if c.LanesPerPeer == 0 {
		c.LanesPerPeer = envvars.TCPLanesPerPeer.Int(defaultLanesPerPeer)
	}
	if c.Memory == nil {
		c.Memory = gpu.System()
	}
	return c
}
