package kvstore

// DefaultTenant is the tenant of clients that name none, and the only
// one of a master without multi-tenancy.
const DefaultTenant = "default"

// TenantMetadataKey is the gRPC metadata entry that carries the tenant id
// of a client's requests to the master (upstream sends tenant_id with
// every object RPC). A request without it works as the default tenant.
const TenantMetadataKey = "mooncake-tenant-id"
