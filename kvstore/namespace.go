package kvstore

import (
	"fmt"
	"net/url"
	"strings"
)

// NamespaceMetadataKey is the metadata entry (of the framed hello, or
// gRPC metadata) that carries a client's namespace (Namespace.Encode) with
// each request to the master. A request without it works in the empty
// namespace.
const NamespaceMetadataKey = "mooncake-namespace"

// Namespace is the Store-RS scope a client works in: keyspace, tenant,
// domain and object set. Two clients see each other's objects only when
// all four are equal; the zero Namespace is the one of clients that name
// none. Every part is free text without control bytes.
type Namespace struct {
	Keyspace  string `json:"keyspace"`
	Tenant    string `json:"tenant"`
	Domain    string `json:"domain"`
	ObjectSet string `json:"object_set"`
}

func (n Namespace) parts() []string { return []string{n.Keyspace, n.Tenant, n.Domain, n.ObjectSet} }

// IsZero reports whether n is the empty namespace.
func (n Namespace) IsZero() bool { return n == Namespace{} }

// Validate rejects parts holding control bytes (< 0x20 or 0x7f).
func (n Namespace) Validate() error {
	names := []string{"keyspace", "tenant", "domain", "object_set"}
	for i, p := range n.parts() {
		if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("%w: %s %q holds a control character", InvalidParams, names[i], p)
		}
	}
	return nil
}

// Encode is n as a metadata value: the four parts path-escaped and
// joined by "/"; "" for the zero namespace.
func (n Namespace) Encode() string {
	if n.IsZero() {
		return ""
	}
	ps := n.parts()
	for i, p := range ps {
		ps[i] = url.PathEscape(p)
	}
	return strings.Join(ps, "/")
}

// ParseNamespace is Encode's inverse; "" is the zero namespace.
func ParseNamespace(s string) (Namespace, error) {
	if s == "" {
		return Namespace{}, nil
	}
	ps := strings.Split(s, "/")
	if len(ps) != 4 {
		return Namespace{}, fmt.Errorf("%w: namespace %q: want keyspace/tenant/domain/object_set", InvalidParams, s)
	}
	for i, p := range ps {
		v, err := url.PathUnescape(p)
		if err != nil {
			return Namespace{}, fmt.Errorf("%w: namespace %q: %v", InvalidParams, s, err)
		}
		ps[i] = v
	}
	n := Namespace{Keyspace: ps[0], Tenant: ps[1], Domain: ps[2], ObjectSet: ps[3]}
	return n, n.Validate()
}

// NamespaceMark starts the key prefix of every non-empty namespace; keys
// of the empty namespace never start with it.
const NamespaceMark = "\x00"

// KeyPrefix is what the master puts before a caller's key to keep it in
// n: "" for the zero namespace, else NamespaceMark, the parts separated
// by 0x1f, and NamespaceMark again (parts hold no control bytes, so the
// prefix is unambiguous).
func (n Namespace) KeyPrefix() string {
	if n.IsZero() {
		return ""
	}
	return NamespaceMark + strings.Join(n.parts(), "\x1f") + NamespaceMark
}

// InNamespace reports whether key (in a tenant's key space) belongs to the
// namespace whose KeyPrefix is prefix, and returns the caller's key.
func InNamespace(key, prefix string) (string, bool) {
	if prefix == "" {
		return key, !strings.HasPrefix(key, NamespaceMark)
	}
	return strings.CutPrefix(key, prefix)
}
