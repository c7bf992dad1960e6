package envvars

// The control plane's TLS files for processes configured through their
// environment (the Python package, the library's clients, the ranks of a
// job); binaries take the same settings as --tls_cert_file, --tls_key_file
// and --tls_ca_file (docs/security.md, "TLS").
var (
	TLSCertFile = &Var{Name: "MC_TLS_CERT_FILE", Kind: File, Default: "none (no TLS unless MC_TLS_CA_FILE is set)",
		ReadBy: "internal/tlsconf", Doc: "PEM certificate this process presents: to its peers as a client (mutual TLS), as a server for what it serves; needs MC_TLS_KEY_FILE"}
	TLSKeyFile = &Var{Name: "MC_TLS_KEY_FILE", Kind: File, Default: "none",
		ReadBy: "internal/tlsconf", Doc: "PEM private key of MC_TLS_CERT_FILE"}
	TLSCAFile = &Var{Name: "MC_TLS_CA_FILE", Kind: File, Default: "none (the system's roots verify servers)",
		ReadBy: "internal/tlsconf", Doc: "PEM CA bundle: a client verifies servers with it; a server requires client certificates it signed (mutual TLS)"}
)

func init() { All = append(All, TLSCertFile, TLSKeyFile, TLSCAFile) }
