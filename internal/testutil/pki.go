package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/tlsconf"
)

// PKI is a test's certificates, made at run time in a temporary
// directory: a CA, a server certificate it signed for loopback
// (127.0.0.1, ::1, localhost), a client certificate it signed, and a
// client certificate signed by another CA (a stranger's).
type PKI struct {
	// Dir holds the PEM files.
	Dir string
	// CA is the CA's certificate file.
	CA string
	// ServerCert and ServerKey are the server's pair.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are the client's pair.
	ClientCert, ClientKey string
	// StrangerCert and StrangerKey are a pair from another CA.
	StrangerCert, StrangerKey string
}

// NewPKI makes a test's certificates (ECDSA P-256, valid for a day).
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{Dir: dir}
	ca, caKey := newCA(t, "mooncake test CA")
	p.CA = writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	p.ServerCert, p.ServerKey = issue(t, dir, "server", ca, caKey, true)
	p.ClientCert, p.ClientKey = issue(t, dir, "client", ca, caKey, false)
	other, otherKey := newCA(t, "stranger CA")
	p.StrangerCert, p.StrangerKey = issue(t, dir, "stranger", other, otherKey, false)
	return p
}

// Server is the server's settings: its pair, and the CA for mutual TLS
// when mutual is true.
func (p *PKI) Server(mutual bool) tlsconf.Files {
	f := tlsconf.Files{CertFile: p.ServerCert, KeyFile: p.ServerKey}
	if mutual {
		f.CAFile = p.CA
	}
	return f
}

// Client is a client's settings that trust the CA and present the
// client's certificate.
func (p *PKI) Client() tlsconf.Files {
	return tlsconf.Files{CertFile: p.ClientCert, KeyFile: p.ClientKey, CAFile: p.CA}
}

// Stranger is a client's settings that trust the CA but present the other
// CA's certificate.
func (p *PKI) Stranger() tlsconf.Files {
	return tlsconf.Files{CertFile: p.StrangerCert, KeyFile: p.StrangerKey, CAFile: p.CA}
}

// Anonymous is a client's settings that trust the CA and present no
// certificate.
func (p *PKI) Anonymous() tlsconf.Files { return tlsconf.Files{CAFile: p.CA} }

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// issue signs a leaf for name and writes name.pem and name-key.pem.
func issue(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, server bool) (string, string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", keyDER)
}

func writePEM(t testing.TB, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// HTTPGet fetches url with a client of files (no TLS when they name
// nothing) and returns the status code and body, or the error.
func HTTPGet(t testing.TB, files tlsconf.Files, url string) (int, string, error) {
	t.Helper()
	cfg, err := files.Client()
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// CheckHTTPSRefusesStrangers checks a TLS listener at addr serving path:
// a client with the PKI's certificate gets 200, and a client speaking
// plain HTTP, a client that presents no certificate and one whose
// certificate another CA signed get no answer (mutual TLS). With mutual
// false, only the plain client must fail and a client with no certificate
// is served.
func (p *PKI) CheckHTTPSRefusesStrangers(t testing.TB, addr, path string, mutual bool) {
	t.Helper()
	if code, body, err := HTTPGet(t, p.Client(), "https://"+addr+path); err != nil || code != http.StatusOK {
		t.Fatalf("client with the certificate: %d %q %v", code, body, err)
	}
	if code, body, err := HTTPGet(t, tlsconf.Files{}, "http://"+addr+path); err == nil && code == http.StatusOK {
		t.Fatalf("a plain HTTP client was served: %d %q", code, body)
	}
	code, body, err := HTTPGet(t, p.Anonymous(), "https://"+addr+path)
	if mutual && err == nil {
		t.Fatalf("a client without a certificate was served (mutual TLS): %d %q", code, body)
	}
	if !mutual && (err != nil || code != http.StatusOK) {
		t.Fatalf("a client without a certificate (server-only TLS): %d %q %v", code, body, err)
	}
	if mutual {
		if code, body, err := HTTPGet(t, p.Stranger(), "https://"+addr+path); err == nil {
			t.Fatalf("a client whose certificate another CA signed was served: %d %q", code, body)
		}
	}
}
