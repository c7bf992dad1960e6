package kvstore

// ClientSecretMetadataKey is the gRPC metadata entry that carries a store
// client's secret: random bytes the client draws with its client id and
// sends with every call. The master binds the secret (its SHA-256) to
// the client id when the client registers (its first mount, remount,
// ping, reservation or disk mount) and from then on lets only calls that
// carry it act for that id (our extension; upstream trusts the client id
// a call asserts).
const ClientSecretMetadataKey = "mooncake-client-secret"

// MinClientSecretLen is the shortest client secret a master accepts: 16
// bytes, as a tenant token.
const MinClientSecretLen = 16
