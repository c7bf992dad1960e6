package kvstore

// DefaultTenant is the tenant of clients that name none, and the only
// one of a master without multi-tenancy.
const DefaultTenant = "default"

// TenantMetadataKey is the gRPC metadata entry that carries the tenant id
// of a client's requests to the master (upstream sends tenant_id with
// every object RPC). A request without it works as the default tenant.
const TenantMetadataKey = "mooncake-tenant-id"

// TenantTokenMetadataKey is the gRPC metadata entry that carries the
// client's tenant token (MC_TENANT_TOKEN), which a master configured with
// --tenant_tokens_file requires with every object RPC (our extension;
// upstream has no tenant authentication).
const TenantTokenMetadataKey = "mooncake-tenant-token"
