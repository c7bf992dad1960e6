// Package metadata is where Transfer Engine segments are published and
// found by name. A Directory hides which backend is in use: a key-value
// Store (etcd, an HTTP metadata server) holding the documents in
// upstream's key layout, or, in P2PHANDSHAKE mode, the peers themselves,
// asked over their handshake port.
package metadata
