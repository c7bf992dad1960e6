package metadata

import (
	"strings"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// RPCMeta is the document under mooncake/rpc_meta/<name>: where the
// segment's handshake (RPC) listener is.
type RPCMeta struct {
	Host    string `json:"ip_or_host_name"`
	RPCPort int    `json:"rpc_port"`
}

// keys builds the upstream key layout, with the optional
// MC_METADATA_CLUSTER_ID prefix. It is the one definition of the layout:
// other packages (the master's cleanup of an expired client) use it
// through SegmentKey and RPCMetaKey.
type keys struct{ prefix string }

// keysOfCluster is the key layout of cluster id ("" for none).
func keysOfCluster(id string) keys {
	p := "mooncake/"
	if id != "" {
		p += id + "/"
	}
	return keys{prefix: p}
}

// segment is the key of a segment descriptor. A name containing '/' is
// used as is under the prefix, as upstream does.
func (k keys) segment(name string) string {
	if strings.Contains(name, "/") {
		return k.prefix + name
	}
	return k.prefix + "ram/" + name
}

func (k keys) rpcMeta(name string) string { return k.prefix + "rpc_meta/" + name }

// SegmentKey is the metadata key under which the segment named name
// publishes its descriptor when MC_METADATA_CLUSTER_ID is clusterID (""
// for unset); `mooncake doctor` looks descriptors up by it.
func SegmentKey(clusterID, name string) string { return keysOfCluster(clusterID).segment(name) }

// RPCMetaKey is the metadata key of segment name's handshake address when
// MC_METADATA_CLUSTER_ID is clusterID ("" for unset):
// "mooncake/[<clusterID>/]rpc_meta/<name>".
func RPCMetaKey(clusterID, name string) string { return keysOfCluster(clusterID).rpcMeta(name) }

// ClusterID is this process's MC_METADATA_CLUSTER_ID ("" when unset), the
// clusterID its engines publish under.
func ClusterID() string { return envvars.MetadataClusterID.Value() }
