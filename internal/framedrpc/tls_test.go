package framedrpc

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

// Both protocols on one TLS port: a framed client and a gRPC client with
// the CA's certificate are answered, and each call's peer carries the
// client certificate (credentials.TLSInfo), whichever protocol it came by.
func TestFramedAndGRPCShareATLSPortAndSeeTheClientCertificate(t *testing.T) {
	pki := testutil.NewPKI(t)
	srvTLS, err := pki.Server(true).Server()
	if err != nil {
		t.Fatal(err)
	}
	cliTLS, err := pki.Client().Client()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{release: make(chan struct{})}
	srv := NewServer(nil)
	srv.RegisterService(&echoDesc, e)
	g := grpc.NewServer(grpc.Creds(tlsconf.Terminated()))
	g.RegisterService(&echoDesc, e)
	go g.Serve(srv.Split(tlsconf.Listen(ln, tlsconf.WithH2(srvTLS))))
	t.Cleanup(func() { g.Stop(); srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fc, err := Dial(ctx, ln.Addr().String(), Options{TLS: cliTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	gc, err := grpc.NewClient(ln.Addr().String(), tlsconf.DialOption(cliTLS))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	for name, cc := range map[string]grpc.ClientConnInterface{"framed": fc, "gRPC": gc} {
		out := new(wrapperspb.StringValue)
		if err := cc.Invoke(ctx, echoMethod, wrapperspb.String("whoami"), out); err != nil || out.Value != "client" {
			t.Errorf("%s call's peer: %q %v, want the client certificate's name", name, out.GetValue(), err)
		}
	}
}
