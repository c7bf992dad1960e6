package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
)

// tenantPolicyFlags are upstream's tenant quota connector flags.
type tenantPolicyFlags struct {
	connectorType, uri string
}

// declareTenantPolicyFlags declares them into fs with upstream's defaults.
func declareTenantPolicyFlags(fs *flag.FlagSet, t *tenantPolicyFlags) {
	fs.StringVar(&t.connectorType, "tenant_quota_connector_type", "file", "where the tenant quota policy lives: file (etcd is not supported)")
	fs.StringVar(&t.uri, "tenant_quota_connector_uri", "", "with --enable_multi_tenants and the file connector: the policy file (upstream's YAML), loaded at start and rewritten by every quota change through the admin API; empty: quotas are set through the admin API only")
}

// check validates the flags and returns the policy file, "" for none.
func (t *tenantPolicyFlags) check(multiTenant, ha bool) (string, error) {
	switch t.connectorType {
	case "file":
	case "etcd":
		return "", errors.New("--tenant_quota_connector_type=etcd is not supported: use the file connector, or no policy file (quotas set through PUT /api/v1/tenant_quotas replicate with --enable_oplog)")
	default:
		return "", fmt.Errorf("--tenant_quota_connector_type=%s: want file or etcd (only file is supported)", t.connectorType)
	}
	switch {
	case t.uri == "":
		return "", nil
	case !multiTenant:
		return "", fmt.Errorf("--tenant_quota_connector_uri=%s needs --enable_multi_tenants", t.uri)
	case ha:
		return "", fmt.Errorf("--tenant_quota_connector_uri=%s is not supported with --enable_ha: quotas replicate through the oplog, not a file each master reads", t.uri)
	case !filepath.IsAbs(t.uri):
		return "", fmt.Errorf("--tenant_quota_connector_uri=%s: want an absolute path", t.uri)
	}
	return t.uri, nil
}
