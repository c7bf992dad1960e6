package master

import (
	"bufio"
	"crypto/subtle"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/mooncake-go/mooncake/kvstore"
)

// AdminTokenID is the entry of a tenant tokens file that holds the admin
// token (tenant ids cannot start with '_', so it names no tenant).
const AdminTokenID = "_admin"

// minTokenLen is the shortest token a tenant tokens file may hold: 16
// bytes, enough for 128 bits written as hex or base64 with room to spare.
const minTokenLen = 16

// maxTokensFile bounds a tenant tokens file.
const maxTokensFile = 1 << 20

// TenantTokens binds tenant ids to the secrets their clients must present
// (--tenant_tokens_file). With tokens configured, an object RPC that names
// tenant T (kvstore.TenantMetadataKey, the default tenant when absent) is
// refused with ILLEGAL_CLIENT unless it carries T's token in
// kvstore.TenantTokenMetadataKey; a tenant without a token cannot be used
// at all. On the admin HTTP port, the tenant endpoints and key listings
// then need "Authorization: Bearer <token>": the admin token for
// everything, a tenant's own token for reading its own quota and keys.
// The zero value (nil map) configures nothing: every client may name any
// tenant, as upstream.
type TenantTokens struct {
	byTenant map[string]string
	admin    string
}

// ParseTenantTokens reads a tenant tokens file: one "tenant_id token" pair
// per line separated by blanks, "#" starting a comment line, blank lines
// ignored. The entry "_admin" is the admin token. Tenant ids follow
// ResolveTenant's rules with multi-tenancy on; a token is at least 16
// bytes of printable ASCII without blanks; an id may appear only once.
func ParseTenantTokens(r io.Reader) (*TenantTokens, error) {
	cfg := Config{MultiTenant: true}
	tt := &TenantTokens{byTenant: map[string]string{}}
	sc := bufio.NewScanner(io.LimitReader(r, maxTokensFile+1))
	sc.Buffer(make([]byte, 4096), maxTokensFile)
	n, read := 0, 0
	for sc.Scan() {
		n++
		read += len(sc.Bytes()) + 1
		if read > maxTokensFile {
			return nil, fmt.Errorf("tenant tokens: more than %d bytes", maxTokensFile)
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("tenant tokens line %d: want \"tenant_id token\"", n)
		}
		id, tok := f[0], f[1]
		if len(tok) < minTokenLen || strings.ContainsFunc(tok, func(r rune) bool { return r <= 0x20 || r >= 0x7f }) {
			return nil, fmt.Errorf("tenant tokens line %d: the token of %q must be at least %d printable ASCII bytes", n, id, minTokenLen)
		}
		if id != AdminTokenID {
			name, code := cfg.ResolveTenant(id)
			if code != kvstore.OK {
				return nil, fmt.Errorf("tenant tokens line %d: invalid tenant id %q", n, id)
			}
			id = name
		}
		if _, dup := tt.byTenant[id]; dup || id == AdminTokenID && tt.admin != "" {
			return nil, fmt.Errorf("tenant tokens line %d: %q appears twice", n, id)
		}
		if id == AdminTokenID {
			tt.admin = tok
		} else {
			tt.byTenant[id] = tok
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tenant tokens: %w", err)
	}
	if len(tt.byTenant) == 0 && tt.admin == "" {
		return nil, fmt.Errorf("tenant tokens: the file lists no token")
	}
	return tt, nil
}

// LoadTenantTokens reads the tenant tokens file at path (ParseTenantTokens).
// It refuses a file that other users may read.
func LoadTenantTokens(path string) (*TenantTokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("tenant tokens file %s is accessible to other users (mode %v); chmod o= it", path, fi.Mode().Perm())
	}
	return ParseTenantTokens(f)
}

// Enabled reports whether tokens are configured.
func (tt *TenantTokens) Enabled() bool { return tt != nil }

// Tenants is the number of tenants with a token.
func (tt *TenantTokens) Tenants() int {
	if tt == nil {
		return 0
	}
	return len(tt.byTenant)
}

// match compares a presented token with a configured one in constant
// time; an empty configured token never matches.
func match(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// allowTenant reports whether token may act as the (resolved) tenant.
// Without tokens configured everything is allowed.
func (tt *TenantTokens) allowTenant(tenant, token string) bool {
	return tt == nil || match(tt.byTenant[tenant], token)
}

// isAdmin reports whether token is the admin token (always, without
// tokens configured).
func (tt *TenantTokens) isAdmin(token string) bool {
	return tt == nil || match(tt.admin, token)
}

// bearer is the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// authorizeChange guards an admin request that changes state. With tenant
// tokens it needs the admin token (authorizeAdmin). Without them nothing
// authenticates the caller, so the change must come from a loopback
// address unless the master runs with --admin_allow_remote; otherwise it
// answers 403 and returns false.
func (s *Server) authorizeChange(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.TenantTokens != nil {
		return s.authorizeAdmin(w, r, "")
	}
	if s.opts.AdminAllowRemote || fromLoopback(r) {
		return true
	}
	writeJSON(w, http.StatusForbidden, adminError{ErrorCode: int32(kvstore.IllegalClient),
		Error: "changes over the admin port come only from this host (loopback) unless the master runs with --admin_allow_remote or --tenant_tokens_file"})
	return false
}

// fromLoopback reports whether r came from a loopback address.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authorizeAdmin lets r through when it carries the admin token, or when
// tenant is not empty and r carries that tenant's token; otherwise it
// answers 401 and returns false. Without tokens configured it lets
// everything through.
func (s *Server) authorizeAdmin(w http.ResponseWriter, r *http.Request, tenant string) bool {
	tt := s.opts.TenantTokens
	tok := bearer(r)
	if tt.isAdmin(tok) || tenant != "" && tt.allowTenant(tenant, tok) {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="mooncake_master"`)
	writeJSON(w, http.StatusUnauthorized, adminError{ErrorCode: int32(kvstore.IllegalClient), Error: "this endpoint needs Authorization: Bearer <token> (--tenant_tokens_file)"})
	return false
}
