// Package tlsconf loads the control plane's TLS settings, the same for
// every binary and library: a certificate and its key, and a CA bundle.
// A server with a certificate serves TLS; with a CA bundle too it requires
// client certificates that CA signed (mutual TLS). A client with a CA
// bundle verifies servers with it (else with the system's roots) and, with
// a certificate, presents it. Nothing set means no TLS, as upstream.
//
// Binaries take --tls_cert_file, --tls_key_file and --tls_ca_file
// (AddFlags); processes configured through their environment read
// MC_TLS_CERT_FILE, MC_TLS_KEY_FILE and MC_TLS_CA_FILE (FromEnv).
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// Files names the PEM files of one process's TLS settings.
type Files struct {
	// CertFile is the certificate (chain) this process presents.
	CertFile string
	// KeyFile is CertFile's private key.
	KeyFile string
	// CAFile is the bundle that verifies the other side: servers for a
	// client, client certificates for a server (mutual TLS).
	CAFile string
}

// AddFlags registers --tls_cert_file, --tls_key_file and --tls_ca_file in
// fs, filling f.
func (f *Files) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.CertFile, "tls_cert_file", "", "PEM certificate to serve TLS with (and to present to TLS servers); needs --tls_key_file. Empty: no TLS")
	fs.StringVar(&f.KeyFile, "tls_key_file", "", "PEM private key of --tls_cert_file")
	fs.StringVar(&f.CAFile, "tls_ca_file", "", "PEM CA bundle: clients must present a certificate it signed (mutual TLS), and servers this process calls are verified with it")
}

// FromEnv returns the settings of MC_TLS_CERT_FILE, MC_TLS_KEY_FILE and
// MC_TLS_CA_FILE (unset: none).
func FromEnv() Files {
	get := func(v *envvars.Var) string { s, _ := v.Lookup(); return s }
	return Files{CertFile: get(envvars.TLSCertFile), KeyFile: get(envvars.TLSKeyFile), CAFile: get(envvars.TLSCAFile)}
}

// Enabled reports whether any file is named, so TLS is on.
func (f Files) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// check refuses half a key pair.
func (f Files) check() error {
	switch {
	case f.CertFile != "" && f.KeyFile == "":
		return errors.New("tls: a certificate file is set without its key file (--tls_key_file, MC_TLS_KEY_FILE)")
	case f.KeyFile != "" && f.CertFile == "":
		return errors.New("tls: a key file is set without its certificate file (--tls_cert_file, MC_TLS_CERT_FILE)")
	}
	return nil
}

// Server returns the configuration a listener serves with: nil when f
// names nothing, an error when it names a CA or key without a certificate
// or a file does not load. With a CA it requires and verifies client
// certificates.
func (f Files) Server() (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.CertFile == "" {
		return nil, errors.New("tls: a server needs a certificate and key (--tls_cert_file, --tls_key_file); only a CA file is set")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		if cfg.ClientCAs, err = loadPool(f.CAFile); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client returns the configuration a client dials with: nil when f names
// nothing, an error when it names half a key pair or a file does not load.
func (f Files) Client() (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: load certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if f.CAFile != "" {
		pool, err := loadPool(f.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// loadPool reads a PEM bundle that must hold at least one certificate.
func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// Export sets this process's MC_TLS_* to f (an empty name unsets its
// variable), so that everything configured by the environment (FromEnv)
// uses f from now on.
func (f Files) Export() {
	for _, v := range []struct {
		v   *envvars.Var
		val string
	}{{envvars.TLSCertFile, f.CertFile}, {envvars.TLSKeyFile, f.KeyFile}, {envvars.TLSCAFile, f.CAFile}} {
		if v.val != "" {
			_ = os.Setenv(v.v.Name, v.val)
		} else {
			_ = os.Unsetenv(v.v.Name)
		}
	}
}
