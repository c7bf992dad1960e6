// Package standalone is the standalone real client (the mooncake_client
// daemon) and its dummy clients.
//
// The daemon (Server) owns one real store client: its segment, its Transfer
// Engine, its place in the cluster. A dummy client (Dummy), inside a worker
// process, forwards every store call to the daemon over a Unix socket
// (package ipc). Bulk data never crosses the socket: the dummy's local
// buffer and the buffers it registers are memfd regions whose descriptors
// it passes to the daemon, which maps them and moves bytes between them and
// the pool itself; calls name memory by the dummy's own addresses, which
// the daemon translates (and bounds-checks) per dummy.
//
// Several dummies share one daemon. Each belongs to a worker scope, which
// selects its hot cache (package hotcache): dummies of one scope share it,
// through a read-only mapping of the cache's memfd, and dummies of other
// scopes never see its bytes. A dummy's regions are released when it
// closes or its process dies (the daemon sees the connection end).
package standalone
