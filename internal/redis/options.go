package redis

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// DefaultPort is the port of a connection string that names none.
const DefaultPort = 6379

// Timeouts of a connection (upstream's: 3 s each).
const (
	DefaultDialTimeout    = 3 * time.Second
	DefaultCommandTimeout = 3 * time.Second
)

// Options say which server to talk to and how to log in.
type Options struct {
	// Addr is the server's host:port.
	Addr string
	// Username and Password are sent with AUTH after connecting, when
	// Password is not empty (Username only with it: an ACL user).
	Username, Password string
	// DB is the database SELECTed after AUTH (0..255).
	DB int
	// DialTimeout bounds connecting and logging in; DefaultDialTimeout
	// when zero.
	DialTimeout time.Duration
	// CommandTimeout bounds a command whose context has no deadline;
	// DefaultCommandTimeout when zero.
	CommandTimeout time.Duration
}

// ParseAddr parses a Redis connection string as upstream does:
// "redis://host:port", "host:port", "[v6]:port", or a host alone (port
// 6379); one trailing "/" is allowed, a path or a list of servers is not.
// It returns the host:port to dial.
func ParseAddr(conn string) (string, error) {
	s := strings.TrimSpace(conn)
	if rest, ok := strings.CutPrefix(s, "redis://"); ok {
		s = rest
	}
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("redis connection string %q: %s (want redis://host:port)", conn, why)
	}
	if scheme, _, ok := strings.Cut(s, "://"); ok {
		return bad("scheme " + scheme + ":// is not supported (TLS to Redis is not implemented)")
	}
	if i := strings.IndexByte(s, '/'); i >= 0 {
		if i != len(s)-1 {
			return bad("a path or database in the URL is not supported (set MC_REDIS_DB_INDEX)")
		}
		s = s[:i]
	}
	if strings.ContainsAny(s, ",;@") {
		return bad("one server only, without credentials (set MC_REDIS_USERNAME and MC_REDIS_PASSWORD)")
	}
	if s == "" {
		return bad("no host")
	}
	host, port := s, strconv.Itoa(DefaultPort)
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end <= 1 {
			return bad("unclosed or empty [IPv6] host")
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return bad("junk after ]")
			}
			port = p
		}
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
	case strings.Count(s, ":") > 1:
		return bad("an IPv6 host must be in brackets")
	}
	if host == "" {
		return bad("no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return bad("port must be 1..65535")
	}
	return net.JoinHostPort(host, port), nil
}

// OptionsFromEnv returns the options for connection string conn with
// the credentials and database of MC_REDIS_USERNAME, MC_REDIS_PASSWORD
// and MC_REDIS_DB_INDEX. A database index that is not 0..255 is an error.
func OptionsFromEnv(conn string) (Options, error) {
	addr, err := ParseAddr(conn)
	if err != nil {
		return Options{}, err
	}
	o := Options{Addr: addr}
	o.Username, _ = envvars.RedisUsername.Lookup()
	o.Password, _ = envvars.RedisPassword.Lookup()
	if v, ok := envvars.RedisDBIndex.Lookup(); ok {
		if err := envvars.RedisDBIndex.Validate(v); err != nil {
			return Options{}, fmt.Errorf("%s=%q: %w", envvars.RedisDBIndex.Name, v, err)
		}
		o.DB, _ = strconv.Atoi(v)
	}
	return o, nil
}
