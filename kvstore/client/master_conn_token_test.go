package client

import (
	"testing"

	"github.com/mooncake-go/mooncake/kvstore"
)

// MC_TENANT_TOKEN travels with every master call, beside the tenant id,
// for a master with --tenant_tokens_file; unset, no token is sent.
func TestMasterCallsCarryTheTenantToken(t *testing.T) {
	m := &masterConn{tenant: "team-a"}
	t.Setenv("MC_TENANT_TOKEN", "")
	if _, ok := m.metadata()[kvstore.TenantTokenMetadataKey]; ok {
		t.Fatal("a token was sent without MC_TENANT_TOKEN")
	}
	t.Setenv("MC_TENANT_TOKEN", "token-of-team-a-0123456789")
	md := m.metadata()
	if md[kvstore.TenantTokenMetadataKey] != "token-of-team-a-0123456789" || md[kvstore.TenantMetadataKey] != "team-a" {
		t.Fatalf("metadata = %v", md)
	}
}
