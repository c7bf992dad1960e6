package client

import (
	"bytes"
	"testing"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
	"github.com/mooncake-go/mooncake/kvstore/master"
)

func setTLSEnv(t *testing.T, f tlsconf.Files) {
	t.Setenv("MC_TLS_CERT_FILE", f.CertFile)
	t.Setenv("MC_TLS_KEY_FILE", f.KeyFile)
	t.Setenv("MC_TLS_CA_FILE", f.CAFile)
}

// Store clients with MC_TLS_* reach a master that serves mutual TLS, over
// framed calls and over gRPC, and its embedded metadata store over
// https://; objects travel between them. A client without the files, or
// with half of them, fails at setup.
func TestClientsWithMCTLSUseAMutualTLSMaster(t *testing.T) {
	pki := testutil.NewPKI(t)
	srvTLS, err := pki.Server(true).Server()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := master.StartService(master.ServiceConfig{RPCAddress: "127.0.0.1:0", HTTPMetadataAddress: "127.0.0.1:0",
		Server: master.Options{Config: master.DefaultConfig()}, TLS: srvTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	rpc, meta := svc.RPCAddr(), "https://"+svc.MetadataAddr()+"/metadata"
	for _, transport := range []string{"framed", "grpc"} {
		t.Run(transport, func(t *testing.T) {
			t.Setenv("MC_STORE_MASTER_RPC", transport)
			setTLSEnv(t, pki.Client())
			a := newClient(t, rpc, meta, 16<<20, 4<<20)
			b := newClient(t, rpc, meta, 16<<20, 4<<20)
			src := fillPattern(buf(t, 4096), 3)
			if err := a.Put("tls-"+transport, part(src), DefaultReplicateConfig(), PutOptions{}); err != nil {
				t.Fatal(err)
			}
			dst := buf(t, 4096)
			if r := b.GetInto("tls-"+transport, part(dst), false); r.Err != nil || !bytes.Equal(src, dst) {
				t.Fatalf("get over TLS: %+v", r)
			}
			for name, f := range map[string]tlsconf.Files{"plain": {}, "without a certificate": pki.Anonymous(),
				"another CA's": pki.Stranger(), "half configured": {CertFile: pki.ClientCert, CAFile: pki.CA}} {
				setTLSEnv(t, f)
				c, err := New(Config{LocalHostname: "127.0.0.1", MetadataServer: meta, GlobalSegmentSize: 16 << 20,
					LocalBufferSize: 4 << 20, MasterServerAddr: rpc})
				if err == nil {
					c.Close()
					t.Errorf("a client %s set up against the mutual TLS master", name)
				}
			}
		})
	}
}
