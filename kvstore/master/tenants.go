package master

import (
	"math"
	"math/bits"
	"sort"
	"strings"

	"github.com/mooncake-go/mooncake/kvstore"
)

// DefaultTenant is the namespace of clients that name no tenant, and the
// only one when multi-tenancy is off.
const DefaultTenant = kvstore.DefaultTenant

// tenantSep separates the tenant from the caller's key in an object key
// (upstream: tenant + '\0' + key). Tenant ids cannot contain it, so the
// first one always ends the tenant.
const tenantSep = "\x00"

// tenant is one tenant's quota and what its objects hold.
type tenant struct {
	quota   uint64 // bytes of replicas the tenant may hold; 0 is no limit
	used    uint64 // bytes of replicas its objects hold now
	objects int
}

// TenantInfo is a tenant's quota and usage, for the admin API and metrics.
type TenantInfo struct {
	ID         string `json:"tenant_id"`
	QuotaBytes uint64 `json:"quota_bytes"` // 0: no limit
	UsedBytes  uint64 `json:"used_bytes"`
	Objects    int    `json:"object_count"`
}

// ResolveTenant maps the tenant id a request carries to the namespace it
// works in. With multi-tenancy off every id is DefaultTenant (upstream:
// no isolation). With it on, "" is DefaultTenant, and an id that starts
// with '_' or holds a control byte (< 0x20, or 0x7f) is INVALID_PARAMS.
func (c Config) ResolveTenant(id string) (string, kvstore.ErrorCode) {
	if !c.MultiTenant || id == "" {
		return DefaultTenant, kvstore.OK
	}
	if strings.HasPrefix(id, "_") || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", kvstore.InvalidParams
	}
	return id, kvstore.OK
}

// ObjectKey is the key under which tenant's object key is kept: key itself
// without multi-tenancy, tenant + "\x00" + key with it. Every State method
// that takes a key takes this form.
func (c Config) ObjectKey(tenant, key string) string {
	if !c.MultiTenant {
		return key
	}
	return tenant + tenantSep + key
}

// splitKey is ObjectKey's inverse: the tenant and the caller's key.
func (s *State) splitKey(objectKey string) (tenant, key string) {
	if !s.cfg.MultiTenant {
		return DefaultTenant, objectKey
	}
	t, k, _ := strings.Cut(objectKey, tenantSep)
	return t, k
}

// UserKey is the caller's part of an object key.
func (s *State) UserKey(objectKey string) string {
	_, k := s.splitKey(objectKey)
	return k
}

// tenantKeys returns tenant's object keys, sorted.
func (s *State) tenantKeys(tenant string) []string {
	if !s.cfg.MultiTenant {
		return s.sortedKeys()
	}
	prefix := tenant + tenantSep
	var keys []string
	for o := range s.objects.all() {
		if strings.HasPrefix(o.key, prefix) {
			keys = append(keys, o.key)
		}
	}
	sort.Strings(keys)
	return keys
}

// TenantKeys returns tenant's keys in the caller's form, sorted.
func (s *State) TenantKeys(tenant string) []string {
	keys := s.tenantKeys(tenant)
	for i, k := range keys {
		keys[i] = s.UserKey(k)
	}
	return keys
}

// replicaBytes is size × replicas, saturated at math.MaxUint64 (no pool
// can hold that much, so a saturated worst case is always refused).
func replicaBytes(size uint64, replicas int) uint64 {
	if replicas <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(size, uint64(replicas))
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// addSat is a + b, saturated at math.MaxUint64.
func addSat(a, b uint64) uint64 {
	sum, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return sum
}

// admitWrite checks that the tenant of objectKey may write size bytes in
// replicas replicas, holding held bytes already under that key (an upsert
// replaces them): TENANT_NOT_REGISTERED for a tenant without a quota entry
// (multi-tenancy only), TENANT_QUOTA_EXCEEDED when the worst case (every
// replica granted) would pass its quota. The worst case is computed
// without wrapping: a size × replicas past 2^64 is past every quota.
func (s *State) admitWrite(objectKey string, size uint64, replicas int, held uint64) kvstore.ErrorCode {
	name, _ := s.splitKey(objectKey)
	t, ok := s.tenants[name]
	if !ok {
		return kvstore.TenantNotRegistered
	}
	if t.quota == 0 {
		return kvstore.OK
	}
	// held is part of used (charge keeps used the sum of what each object
	// holds), so used - held cannot wrap; min guards the invariant anyway.
	if addSat(t.used-min(held, t.used), replicaBytes(size, replicas)) > t.quota {
		return kvstore.TenantQuotaExceeded
	}
	return kvstore.OK
}

// charge brings the usage of o's tenant in line with what o holds now
// (nothing once it is erased or left without replicas). Every change of an
// object's replicas or size ends with it.
func (s *State) charge(o *object) {
	s.kvAvailability(o)
	s.indexLease(o)
	held := replicaBytes(o.size, len(o.replicas))
	if _, live := s.objects.lookup(o.key); !live {
		held = 0
	}
	if held == o.charged {
		return
	}
	// Objects exist only for registered tenants, and a tenant holding
	// objects cannot be unregistered (DeleteTenantQuota).
	name, _ := s.splitKey(o.key)
	t := s.tenants[name]
	switch {
	case o.charged == 0:
		t.objects++
	case held == 0:
		t.objects--
	}
	// used is the sum of what the tenant's objects hold: every replica is
	// a buffer in a mounted segment and the mounted capacity fits in a
	// uint64 (mount refuses more), so neither step wraps; saturating keeps
	// a broken invariant from wrapping used to a small number.
	t.used = addSat(t.used-min(o.charged, t.used), held)
	o.charged = held
}

// SetTenantQuota registers tenant (or changes its quota) with a limit of
// quota bytes of replicas, 0 for none. A quota below what the tenant holds
// now is accepted: its writes fail until it is back under. Ids are
// validated as ResolveTenant does; without multi-tenancy only the default
// tenant exists (NOT_SUPPORTED for another id).
func (s *State) SetTenantQuota(id string, quota uint64) kvstore.ErrorCode {
	name, code := s.resolveRegistered(id)
	if code != kvstore.OK {
		return code
	}
	t := s.tenants[name]
	if t == nil {
		t = &tenant{}
		s.tenants[name] = t
	}
	t.quota = quota
	return kvstore.OK
}

// DeleteTenantQuota unregisters tenant: TENANT_NOT_EMPTY while it holds
// objects, TENANT_NOT_REGISTERED if it is not registered, INVALID_PARAMS
// for the default tenant (always registered).
func (s *State) DeleteTenantQuota(id string) kvstore.ErrorCode {
	name, code := s.resolveRegistered(id)
	switch {
	case code != kvstore.OK:
		return code
	case name == DefaultTenant:
		return kvstore.InvalidParams
	}
	t, ok := s.tenants[name]
	switch {
	case !ok:
		return kvstore.TenantNotRegistered
	case t.objects > 0:
		return kvstore.TenantNotEmpty
	}
	delete(s.tenants, name)
	return kvstore.OK
}

func (s *State) resolveRegistered(id string) (string, kvstore.ErrorCode) {
	if !s.cfg.MultiTenant && id != "" && id != DefaultTenant {
		return "", kvstore.NotSupported
	}
	return s.cfg.ResolveTenant(id)
}

// Tenant returns one registered tenant's quota and usage.
func (s *State) Tenant(id string) (TenantInfo, kvstore.ErrorCode) {
	name, code := s.resolveRegistered(id)
	if code != kvstore.OK {
		return TenantInfo{}, code
	}
	t, ok := s.tenants[name]
	if !ok {
		return TenantInfo{}, kvstore.TenantNotRegistered
	}
	return TenantInfo{ID: name, QuotaBytes: t.quota, UsedBytes: t.used, Objects: t.objects}, kvstore.OK
}

// Tenants returns every registered tenant, sorted by id.
func (s *State) Tenants() []TenantInfo {
	out := make([]TenantInfo, 0, len(s.tenants))
	for name, t := range s.tenants {
		out = append(out, TenantInfo{ID: name, QuotaBytes: t.quota, UsedBytes: t.used, Objects: t.objects})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
