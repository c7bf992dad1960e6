package transfer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// ErrMetadataNotFound is returned by a MetadataStore for a missing key.
var ErrMetadataNotFound = errors.New("metadata key not found")

// MetadataStore is a key-value store that segments publish their
// descriptors in. Implementations: etcd and HTTP. (P2P handshake mode has no
// store: descriptors are fetched from the peer itself.)
type MetadataStore interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	Close() error
}

// P2PHandshake is the metadata "server" string that selects peer-to-peer
// handshake mode.
const P2PHandshake = "P2PHANDSHAKE"

// MetadataConn is a parsed metadata connection string.
type MetadataConn struct {
	Kind string // "etcd", "http" (also https), or "p2p"
	// Target is what the backend dials: for etcd the endpoints joined by
	// commas; for http the full URL.
	Target string
}

// ParseMetadataConn parses a metadata connection string as upstream does:
// "P2PHANDSHAKE", "etcd://h:p[,h2:p2]", "http(s)://h:p/path", or a bare
// "host:port" meaning etcd.
func ParseMetadataConn(s string) (MetadataConn, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return MetadataConn{}, errorf(CodeInvalidArgument, nil, "empty metadata server")
	case strings.EqualFold(s, P2PHandshake):
		return MetadataConn{Kind: "p2p"}, nil
	}
	proto, rest, ok := strings.Cut(s, "://")
	if !ok {
		return MetadataConn{Kind: "etcd", Target: s}, nil
	}
	switch strings.ToLower(proto) {
	case "etcd":
		if rest == "" {
			return MetadataConn{}, errorf(CodeInvalidArgument, nil, "etcd metadata server %q has no endpoints", s)
		}
		return MetadataConn{Kind: "etcd", Target: rest}, nil
	case "http", "https":
		return MetadataConn{Kind: "http", Target: s}, nil
	default:
		return MetadataConn{}, errorf(CodeNotImplemented, nil, "metadata protocol %q is not supported (etcd, http, P2PHANDSHAKE)", proto)
	}
}

// metadataKeys builds the upstream key layout, with the optional
// MC_METADATA_CLUSTER_ID prefix. It is the one definition of the layout:
// other packages (the master's cleanup of an expired client) use it through
// SegmentMetadataKey and RPCMetaKey.
type metadataKeys struct{ prefix string }

func newMetadataKeys() metadataKeys { return keysOfCluster(ClusterID()) }

// keysOfCluster is the key layout of cluster id ("" for none).
func keysOfCluster(id string) metadataKeys {
	p := "mooncake/"
	if id != "" {
		p += id + "/"
	}
	return metadataKeys{prefix: p}
}

// segment is the key of a segment descriptor. A name containing '/' is used
// as is under the prefix, as upstream does.
func (k metadataKeys) segment(name string) string {
	if strings.Contains(name, "/") {
		return k.prefix + name
	}
	return k.prefix + "ram/" + name
}

func (k metadataKeys) rpcMeta(name string) string { return k.prefix + "rpc_meta/" + name }

// RPCMetaKey is the metadata key of segment name's handshake address when
// MC_METADATA_CLUSTER_ID is clusterID ("" for unset):
// "mooncake/[<clusterID>/]rpc_meta/<name>".
func RPCMetaKey(clusterID, name string) string { return keysOfCluster(clusterID).rpcMeta(name) }

// ClusterID is this process's MC_METADATA_CLUSTER_ID ("" when unset), the
// clusterID its engines publish under.
func ClusterID() string { return envvars.MetadataClusterID.Value() }

// openMetadataStore connects the store for a non-P2P connection.
func openMetadataStore(c MetadataConn) (MetadataStore, error) {
	switch c.Kind {
	case "etcd":
		return NewEtcdStore(strings.Split(c.Target, ","))
	case "http":
		return NewHTTPStore(c.Target), nil
	default:
		return nil, fmt.Errorf("no metadata store for %q", c.Kind)
	}
}

// SegmentMetadataKey is the metadata key under which the segment named name
// publishes its descriptor when MC_METADATA_CLUSTER_ID is clusterID ("" for
// unset); `mooncake doctor` looks descriptors up by it.
func SegmentMetadataKey(clusterID, name string) string { return keysOfCluster(clusterID).segment(name) }
