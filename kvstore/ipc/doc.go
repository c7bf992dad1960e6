// Package ipc is the local transport between the standalone real client
// (mooncake_client) and its dummy clients: framed request/response
// messages over a Unix stream socket, with file descriptors (memfd regions)
// passed beside a message by SCM_RIGHTS, and memfd regions mapped on both
// sides. It knows nothing of the store: bodies are opaque bytes.
package ipc
