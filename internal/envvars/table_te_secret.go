package envvars

// The Transfer Engine's cluster secret (docs/security.md, "Authenticated
// TE peers"): with one set, the TCP data port serves only peers that
// prove they hold it.
var (
	TESecretFile = &Var{Name: "MC_TE_SECRET_FILE", Kind: File, Default: "none",
		ReadBy: "transfer", Doc: "file holding the TE cluster secret (at least 16 bytes, blanks around it trimmed; not readable by other users): TCP data connections run an HMAC-SHA256 challenge-response both ways and serve only peers holding it. Wins over MC_TE_SECRET"}
	TESecret = &Var{Name: "MC_TE_SECRET", Kind: Text, Default: "none (peers are not authenticated, as upstream)",
		ReadBy: "transfer", Doc: "the TE cluster secret itself, when MC_TE_SECRET_FILE is not set (visible in /proc/PID/environ to the same user)",
		Secret: true}
)

func init() { All = append(All, TESecretFile, TESecret) }
