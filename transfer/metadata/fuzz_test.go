package metadata

import (
	"net"
	"strconv"
	"testing"
)

// FuzzDecodeRPCMeta feeds arbitrary documents to the rpc_meta decoder (any
// writer of the metadata store controls them): no panic, and what it
// accepts names a host and a port that make a dialable address.
func FuzzDecodeRPCMeta(f *testing.F) {
	f.Add([]byte(`{"ip_or_host_name":"127.0.0.1","rpc_port":15001}`))
	f.Add([]byte(`{"ip_or_host_name":"::1","rpc_port":65535}`))
	f.Add([]byte(`{"ip_or_host_name":"h","rpc_port":-1}`))
	f.Add([]byte(`{"ip_or_host_name":"a/b@c","rpc_port":80}`))
	f.Add([]byte(`{"rpc_port":99999999999999999999}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rpc, err := decodeRPCMeta(b)
		if err != nil {
			return
		}
		host, port, err := net.SplitHostPort(net.JoinHostPort(rpc.Host, strconv.Itoa(rpc.RPCPort)))
		if err != nil || host != rpc.Host || port != strconv.Itoa(rpc.RPCPort) {
			t.Fatalf("accepted %+v, which does not round-trip as an address: %q %q %v", rpc, host, port, err)
		}
		if rpc.RPCPort < 1 || rpc.RPCPort > 65535 {
			t.Fatalf("accepted port %d", rpc.RPCPort)
		}
	})
}
