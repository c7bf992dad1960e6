package tlsconf

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// alpnH2 is the protocol gRPC's TLS clients insist the server selects.
const alpnH2 = "h2"

// DialOption is the gRPC transport credentials of a client with cfg: TLS,
// or insecure ones when cfg is nil.
func DialOption(cfg *tls.Config) grpc.DialOption {
	if cfg == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// ServerOptions are the gRPC options of a server with cfg: TLS
// credentials, or none when cfg is nil.
func ServerOptions(cfg *tls.Config) []grpc.ServerOption {
	if cfg == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}
}

// WithH2 returns a copy of a server cfg that also offers h2 by ALPN, for a
// listener that terminates TLS itself and hands gRPC's connections on
// (Terminated); nil for a nil cfg.
func WithH2(cfg *tls.Config) *tls.Config {
	if cfg == nil {
		return nil
	}
	cfg = cfg.Clone()
	for _, p := range cfg.NextProtos {
		if p == alpnH2 {
			return cfg
		}
	}
	cfg.NextProtos = append(cfg.NextProtos, alpnH2)
	return cfg
}

// Terminated returns gRPC server credentials for connections whose TLS a
// listener (Listen) has already terminated: the handshake is done, and a
// call's peer carries the connection's TLS state (credentials.TLSInfo), as
// with gRPC's own TLS credentials. A connection without TLS is refused.
func Terminated() credentials.TransportCredentials { return terminated{} }

type terminated struct{}

func (terminated) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsconf: Terminated credentials are for servers")
}

func (terminated) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	st, ok := State(c)
	if !ok {
		return nil, nil, errors.New("tlsconf: connection without TLS")
	}
	if !st.HandshakeComplete {
		return nil, nil, errors.New("tlsconf: TLS handshake not done")
	}
	return c, AuthInfo(st), nil
}

func (terminated) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (t terminated) Clone() credentials.TransportCredentials { return t }

func (terminated) OverrideServerName(string) error { return nil }

// AuthInfo is the gRPC view of a TLS connection's state, what a call's
// peer.Peer carries.
func AuthInfo(st tls.ConnectionState) credentials.AuthInfo {
	return credentials.TLSInfo{State: st, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
}
