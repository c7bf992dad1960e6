package kvstore

import (
	"errors"
	"testing"
)

func TestNamespaceEncodeParseRoundTrip(t *testing.T) {
	for _, n := range []Namespace{
		{},
		{Domain: "chat"},
		{Keyspace: "ks", Tenant: "team/a", Domain: "sglang chat", ObjectSet: "r1%build"},
	} {
		got, err := ParseNamespace(n.Encode())
		if err != nil || got != n {
			t.Errorf("ParseNamespace(%q) = %+v, %v; want %+v", n.Encode(), got, err, n)
		}
	}
	for _, bad := range []string{"a/b/c", "a/b/c/d/e", "a/%zz/c/d", "a/b\x01/c/d"} {
		if _, err := ParseNamespace(bad); !errors.Is(err, InvalidParams) {
			t.Errorf("ParseNamespace(%q) = %v, want INVALID_PARAMS", bad, err)
		}
	}
}

func TestKeyPrefixesKeepNamespacesApart(t *testing.T) {
	a, b := Namespace{Domain: "a"}, Namespace{Domain: "a", ObjectSet: "x"}
	if a.KeyPrefix() == b.KeyPrefix() || (Namespace{}).KeyPrefix() != "" {
		t.Fatalf("prefixes %q %q", a.KeyPrefix(), b.KeyPrefix())
	}
	key := a.KeyPrefix() + "k"
	if k, ok := InNamespace(key, a.KeyPrefix()); !ok || k != "k" {
		t.Errorf("InNamespace(a) = %q, %v", k, ok)
	}
	if _, ok := InNamespace(key, b.KeyPrefix()); ok {
		t.Error("a key of namespace a is in namespace b")
	}
	if _, ok := InNamespace(key, ""); ok {
		t.Error("a namespaced key is in the empty namespace")
	}
	if k, ok := InNamespace("plain", ""); !ok || k != "plain" {
		t.Errorf("InNamespace(plain, \"\") = %q, %v", k, ok)
	}
}
