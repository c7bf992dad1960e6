package metadata

import (
	"context"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testutil"
	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

func setTLSEnv(t *testing.T, f tlsconf.Files) {
	t.Setenv("MC_TLS_CERT_FILE", f.CertFile)
	t.Setenv("MC_TLS_KEY_FILE", f.KeyFile)
	t.Setenv("MC_TLS_CA_FILE", f.CAFile)
}

// putGet opens "etcd://"+endpoint with the MC_TLS_* of the moment and
// writes and reads one key.
func putGet(t *testing.T, endpoint string) error {
	t.Helper()
	c, err := ParseConn("etcd://" + endpoint)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Open(c)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := st.Put(ctx, "mooncake/ram/tls", []byte("v")); err != nil {
		return err
	}
	_, err = st.Get(ctx, "mooncake/ram/tls")
	return err
}

// The engine's etcd metadata client takes MC_TLS_* for https:// endpoints:
// with the CA's client certificate it uses an etcd that requires one;
// without a certificate, or with another CA's, it is refused.
func TestEtcdStoreOverMutualTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	ep := testutil.StartEtcdTLS(t, pki)
	setTLSEnv(t, pki.Client())
	if err := putGet(t, ep); err != nil {
		t.Fatalf("with the CA's certificate: %v", err)
	}
	for name, f := range map[string]tlsconf.Files{"no files": {}, "without a certificate": pki.Anonymous(), "another CA's": pki.Stranger()} {
		setTLSEnv(t, f)
		if err := putGet(t, ep); err == nil {
			t.Errorf("a client with %s was served", name)
		}
	}
}
