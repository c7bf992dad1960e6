package master

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/mooncake-go/mooncake/internal/durablefile"
	"github.com/mooncake-go/mooncake/kvstore"
)

// This file is the tenant quota policy file (upstream's "file" tenant
// quota connector, --tenant_quota_connector_uri), in upstream's format:
//
//	version: 1
//
//	tenants:
//	  - name: "tenant-a"
//	    quota: 4GB
//
// A quota is a positive integer with an optional unit B, KB, MB, GB or
// TB (powers of 1024). The master registers the file's tenants at start
// and writes the policy back after every change through the admin API.

// tenantPolicyDoc is the file's YAML document.
type tenantPolicyDoc struct {
	Version *int `yaml:"version"`
	Tenants *[]struct {
		Name  *string `yaml:"name"`
		Quota *string `yaml:"quota"`
	} `yaml:"tenants"`
}

// ParseTenantQuotaPolicy reads a policy file's content: each tenant's
// quota in bytes. Every tenant id is checked as cfg.ResolveTenant does.
func ParseTenantQuotaPolicy(data []byte, cfg Config) (map[string]uint64, error) {
	var doc tenantPolicyDoc
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	switch {
	case doc.Version == nil:
		return nil, errors.New("version is required")
	case *doc.Version != 1:
		return nil, fmt.Errorf("unsupported version %d (want 1)", *doc.Version)
	case doc.Tenants == nil:
		return nil, errors.New("tenants must be a sequence")
	}
	out := make(map[string]uint64, len(*doc.Tenants))
	for i, t := range *doc.Tenants {
		if t.Name == nil || t.Quota == nil {
			return nil, fmt.Errorf("tenant %d: name and quota are required", i+1)
		}
		id, code := cfg.ResolveTenant(*t.Name)
		if code != kvstore.OK || *t.Name == "" {
			return nil, fmt.Errorf("tenant %d: invalid tenant name %q", i+1, *t.Name)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("duplicate tenant name %q", id)
		}
		q, err := parseQuotaBytes(*t.Quota)
		if err != nil {
			return nil, fmt.Errorf("tenant %q: %w", id, err)
		}
		out[id] = q
	}
	return out, nil
}

// parseQuotaBytes reads a positive quota with an optional unit.
func parseQuotaBytes(s string) (uint64, error) {
	digits := len(s) - len(strings.TrimLeft(s, "0123456789"))
	if digits == 0 {
		return 0, fmt.Errorf("quota %q must start with an integer", s)
	}
	n, err := strconv.ParseUint(s[:digits], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("quota %q overflows 64 bits", s)
	}
	if n == 0 {
		return 0, fmt.Errorf("quota %q must be positive", s)
	}
	units := map[string]uint{"": 0, "B": 0, "KB": 10, "MB": 20, "GB": 30, "TB": 40}
	shift, ok := units[s[digits:]]
	if !ok {
		return 0, fmt.Errorf("quota %q: unit %q is not one of B, KB, MB, GB, TB", s, s[digits:])
	}
	if n > (^uint64(0))>>shift {
		return 0, fmt.Errorf("quota %q overflows 64 bits", s)
	}
	return n << shift, nil
}

// FormatTenantQuotaPolicy writes quotas in the file's format, tenants in
// id order.
func FormatTenantQuotaPolicy(quotas map[string]uint64) []byte {
	if len(quotas) == 0 {
		return []byte("version: 1\n\ntenants: []\n")
	}
	ids := make([]string, 0, len(quotas))
	for id := range quotas {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	b.WriteString("version: 1\n\ntenants:\n")
	for _, id := range ids {
		fmt.Fprintf(&b, "  - name: %s\n    quota: %d\n", strconv.Quote(id), quotas[id])
	}
	return []byte(b.String())
}

// policyWriter serializes the policy file's writes.
type policyWriter struct{ mu sync.Mutex }

// loadTenantPolicy registers the policy file's tenants in st.
func loadTenantPolicy(st *State, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("tenant quota policy: %w", err)
	}
	quotas, err := ParseTenantQuotaPolicy(data, st.cfg)
	if err != nil {
		return fmt.Errorf("tenant quota policy %s: %w", path, err)
	}
	for id, q := range quotas {
		if code := st.SetTenantQuota(id, q); code != kvstore.OK {
			return fmt.Errorf("tenant quota policy %s: tenant %q: %v", path, id, code)
		}
	}
	return nil
}

// saveTenantPolicy writes the registered tenants with a quota to the
// policy file, whole or not at all (a tenant without a limit, quota 0,
// has no form in the file: the admin API refuses one while a file is in
// use, and the default tenant, always registered, is written only with a
// limit).
func (s *Server) saveTenantPolicy() error {
	s.policy.mu.Lock()
	defer s.policy.mu.Unlock()
	quotas := map[string]uint64{}
	s.WithState(func(st *State, _ time.Time) {
		for _, t := range st.Tenants() {
			if t.QuotaBytes > 0 {
				quotas[t.ID] = t.QuotaBytes
			}
		}
	})
	path := s.opts.TenantPolicyFile
	if err := durablefile.Write(path, FormatTenantQuotaPolicy(quotas), 0o644); err != nil {
		return fmt.Errorf("tenant quota policy %s not written: %w", path, err)
	}
	_ = durablefile.SyncDir(filepath.Dir(path))
	return nil
}
