/*
 * mooncake.h - the C ABI of Mooncake-Go (libmooncake.so).
 *
 * One shared library per process: Python (ctypes) and the torch plugin load
 * this same file. This header is the ABI's one declaration: the library's
 * Go exports are compiled against it (capi/cgo.h), and the Python ctypes
 * tables and structs are checked against it (tests/test_package.py).
 * Conventions:
 *   - Objects are opaque uint64_t handles; 0 is never a valid handle.
 *   - Strings are NUL-terminated UTF-8. A returned char* is malloc'd and must
 *     be released with mc_free(); NULL means "no value".
 *   - Errors: see "Errors" below.
 *   - Addresses are absolute virtual addresses in the owning process.
 *   - No function blocks longer than the transfer timeout
 *     (MC_TRANSFER_TIMEOUT seconds, default 30) plus connection set-up.
 *
 * Handles and lifetimes:
 *   - A handle is the caller's reference to its object. mc_*_destroy /
 *     mc_store_close release it; the handle is invalid from then on, and a
 *     call with it fails as with any unknown handle: -1 (engine, EP; 0 for
 *     functions returning a handle, an id or an address, NULL for strings),
 *     -600 (store), -3 (collectives; -1 where a function says so).
 *   - Objects that are given an engine retain it: mc_store_setup(engine)
 *     until mc_store_close, mc_pg_set_transfer_engine until the engine is
 *     replaced or cleared (the collectives runtime lives as long as the
 *     process). The engine closes when its last reference is released, so
 *     mc_engine_destroy on a shared engine only ends the caller's use.
 *   - Closing (engine, EP buffer, store) first refuses new work, then
 *     cancels or waits for work in flight, and only then frees memory. A
 *     call that reaches an object while it is closing fails: -202 with an
 *     "engine closed" / "ep: buffer closed" message (engine, EP), -600
 *     (store). Pending work gets an error, never freed memory: an EP
 *     operation canceled by mc_ep_buffer_destroy completes with -202, a
 *     transfer canceled by the engine's close ends failed.
 *
 * Errors (one convention for every function):
 *   - The result says whether a call failed: an int result is 0 on success
 *     (or the non-negative value the function documents: a count, a size,
 *     a flag) and a negative error number on failure; a handle, id or
 *     address is 0 on failure; a string is NULL. Functions without a result
 *     that take a results array put a number per item there.
 *   - Error numbers come from one table per family, upstream's where
 *     upstream has one:
 *       Transfer Engine (mc_engine_*, mc_rpc_*, mc_ep_*, mc_pointer_kind,
 *       mc_copy_memory): -1 invalid argument (also the generic failure),
 *       -2 too many requests, -3 address not registered, -4 batch busy,
 *       -7 address overlapped, -102 socket, -103 malformed JSON,
 *       -104 handshake rejected, -200 metadata, -202 context/timeout
 *       (also "closed"), -302 memory, -303 not implemented;
 *       Store (mc_store_*): upstream Mooncake Store's ErrorCode (-600
 *       invalid params, also "handle not set up", -704 object not found, ...;
 *       see the store section);
 *       Collectives (mc_pg_*): -1 invalid request, -2 peer failure, -3 group
 *       destroyed, -4 group broken, -5 other. These are ours: upstream has
 *       no C ABI for its backend, and the numbers are the outcome kinds the
 *       torch plugin turns into exceptions (-1 for an unknown handle where
 *       a function returns a count).
 *   - Every failure also records a message for the calling thread:
 *     mc_last_error() returns it (malloc'd; free with mc_free). It is only
 *     meaningful right after a call that failed: a successful call leaves
 *     it as it was. A call with per-item results leaves the message of the
 *     last item that failed. Functions that take `char **err` also store a
 *     copy of the message there (malloc'd; free with mc_free) unless err is
 *     NULL; they predate mc_last_error and are kept for their callers.
 *   - Documented exceptions (kept as upstream or because they are states,
 *     not failures): mc_engine_check_batch (-1 failed, -2 timed out: the
 *     batch's outcome, with a message), mc_store_health_check (1, 2),
 *     mc_store_stop_metrics_server (1: none ran), mc_rpc_server_next (0 on a
 *     timeout), mc_ep_op_done (1 for an unknown handle),
 *     mc_store_get_session_end (-1 for a handle not set up, as upstream).
 *
 * Panics: no Go panic crosses this ABI. A panic on the calling thread
 * inside any function is recovered there (and logged with its stack); the
 * call returns its failure value: -1 for int results (collectives: -5), 0
 * for handles, ids and addresses, NULL for strings, with the message as the
 * thread's last error (and in *err where the function takes one).
 * Functions without a result return, their outputs possibly unfilled. Work
 * that runs on the library's own threads (async EP receives, collective
 * ops) reports errors through its completion instead.
 */
#ifndef MOONCAKE_H
#define MOONCAKE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Library version string, e.g. "0.1.0". Free with mc_free. */
char *mc_version(void);

/* Release memory returned by this library. */
void mc_free(void *p);

/* Point out[0..n) at the n NUL-terminated keys packed back to back in
 * packed[0..size), the last ending at packed[size-1], so that a binding
 * builds a batch's key array from one buffer. 0, or -1 (out untouched)
 * when the buffer does not hold exactly n keys. */
int mc_split_keys(const char *packed, size_t size, int n, const char **out);

/* Message of the last failed call on the calling thread ("" if none); see
 * "Errors". Free with mc_free. */
char *mc_last_error(void);

/* Set this process's control-plane TLS files (MC_TLS_CERT_FILE,
 * MC_TLS_KEY_FILE, MC_TLS_CA_FILE; NULL or "" unsets one): what the store
 * client, the metadata clients, the engine's RPC interface and the
 * collectives read when they next connect or listen. Files are loaded
 * then, not here. Always 0. */
int mc_set_tls_files(const char *cert_file, const char *key_file, const char *ca_file);

/* ---- Transfer Engine ------------------------------------------------- */

/* Create an engine handle; it does nothing until mc_engine_initialize. */
uint64_t mc_engine_create(void);

/* Start the engine.
 *   local_hostname:  "host" or "host:port"; names the local segment (in
 *                    P2PHANDSHAKE mode the name becomes "host:<rpc_port>").
 *   metadata_server: "P2PHANDSHAKE", "etcd://h:p[,h2:p2]", "h:p" (etcd), or
 *                    "http://h:p/metadata".
 *   protocol:        "tcp" (or "" for the default). Others: -303.
 *   device_name:     NIC filter; ignored by the TCP engine.
 * Returns 0 or a negative error number. */
int mc_engine_initialize(uint64_t engine, const char *local_hostname,
                         const char *metadata_server, const char *protocol,
                         const char *device_name);

/* Release the handle. When no store or collectives runtime retains the
 * engine (see "Handles and lifetimes"), it closes: new work is refused,
 * peers are cut off (their transfers into this engine's memory fail), work
 * in flight is canceled, the metadata is withdrawn and all memory is
 * unregistered, managed buffers freed. */
void mc_engine_destroy(uint64_t engine);

/* Port of the handshake (RPC) listener, or -1. */
int mc_engine_get_rpc_port(uint64_t engine);

/* Name peers open this engine's segment by. Free with mc_free. */
char *mc_engine_segment_name(uint64_t engine);

/* The engine's counters in the Prometheus text format
 * (mooncake_te_tcp_refused_peers_total: data connections refused because
 * the peer did not prove it holds the cluster secret). Not upstream's.
 * Free with mc_free; NULL with mc_last_error set for a bad handle. */
char *mc_engine_metrics_text(uint64_t engine);

/* Allocate and register length bytes of memfd-backed memory that same-host
 * peers map directly (transfers into it are memcpy). Returns the address,
 * or 0 on failure. */
uint64_t mc_engine_allocate_managed_buffer(uint64_t engine, uint64_t length);

/* Unregister and free a buffer from mc_engine_allocate_managed_buffer. */
int mc_engine_free_managed_buffer(uint64_t engine, uint64_t addr);

/* Register n buffers (addrs[i], lengths[i]) for remote access and publish
 * the segment once. Overlap with a registered buffer is -7; on failure
 * nothing stays registered. location is a placement hint ("*", "cpu:0"). */
int mc_engine_register_memory(uint64_t engine, const uint64_t *addrs,
                              const uint64_t *lengths, int n,
                              const char *location);

/* Unregister the n buffers starting at addrs[i]; waits for transfers using
 * them. Unregisters all it can and returns the first error. */
int mc_engine_unregister_memory(uint64_t engine, const uint64_t *addrs, int n);

/* Run n transfers to segment `target` and wait for them: READ (opcode 0)
 * or WRITE (1) of lengths[i] bytes between local buffers[i] (registered) and
 * the target's absolute address peer_addrs[i]. If notify_name is non-NULL, a
 * notification {notify_name, notify_msg} is sent to the target after the
 * data. transport_hint (upstream's) is NULL or "" for the engine's choice,
 * or "tcp" or "shm" for that transport only ("rdma" and "efa" run as tcp);
 * any other name fails the call before anything moves. Returns 0 when every
 * transfer completed, else a negative number. */
int mc_engine_transfer_sync(uint64_t engine, const char *target, int opcode,
                            const uint64_t *buffers, const uint64_t *peer_addrs,
                            const uint64_t *lengths, int n,
                            const char *notify_name, const char *notify_msg,
                            const char *transport_hint);

/* Submit n transfers as one batch without waiting (transport_hint as for
 * mc_engine_transfer_sync). Returns the batch id, or 0 on failure (nothing
 * submitted). */
uint64_t mc_engine_transfer_async(uint64_t engine, const char *target,
                                  int opcode, const uint64_t *buffers,
                                  const uint64_t *peer_addrs,
                                  const uint64_t *lengths, int n,
                                  const char *transport_hint);

/* Wait for n batches and free them. 0 if all completed, -1 if any failed or
 * timed out. */
int mc_engine_wait_batches(uint64_t engine, const uint64_t *batch_ids, int n);

/* Poll one batch: 1 completed (freed), 0 pending, -1 failed (freed),
 * -2 timed out (freed). */
int mc_engine_check_batch(uint64_t engine, uint64_t batch_id);

/* Copy length bytes from src into this engine's registered memory at addr.
 * Fails (-3), touching nothing, unless the whole range is registered. */
int mc_engine_write_local(uint64_t engine, uint64_t addr, const void *src,
                          uint64_t length);

/* Copy length bytes of this engine's registered memory at addr into dst.
 * Fails (-3) unless the whole range is registered. */
int mc_engine_read_local(uint64_t engine, uint64_t addr, void *dst,
                         uint64_t length);

/* Address of the first registered buffer of segment `segment`, 0 if none. */
uint64_t mc_engine_first_buffer_address(uint64_t engine, const char *segment);

/* Drain received notifications as a JSON array of
 * {"name": ..., "notify_msg": ...}. Free with mc_free. */
char *mc_engine_get_notifies(uint64_t engine);

/* Send notification {name, msg} to segment `target`. */
int mc_engine_send_notify(uint64_t engine, const char *target,
                          const char *name, const char *msg);

/* 0 if segment `peer` answers its handshake port. */
int mc_engine_send_probe(uint64_t engine, const char *peer);

/* Host topology JSON: {"cpu:N": [[preferred NICs], [available NICs]]},
 * and "cuda:N" entries for the GPUs NVML reports. */
char *mc_local_topology(void);

/* ---- GPU memory ------------------------------------------------------ *
 * The CUDA driver (libcuda.so.1) is loaded at run time on first use; with
 * none, every pointer is host memory. */

/* 0 host, 1 device, 2 managed memory; -1 when the CUDA driver fails.
 * *device (may be NULL) gets the GPU ordinal, -1 for host memory. */
int mc_pointer_kind(uint64_t ptr, int *device);

/* Copy n bytes from src to dst, either of which may be device memory;
 * returns when done: 0, or -1 on a CUDA error. */
int mc_copy_memory(uint64_t dst, uint64_t src, uint64_t n);

/* ---- Engine RPC messages (mooncake.engine.RpcInterface) -------------- *
 * A server queues typed messages (a kind 0..255 and opaque bytes) sent by
 * clients over TCP; a client's send returns once the server has queued
 * the message. Our own wire format (transfer/rpcmsg), not coro_rpc's. */

/* Listen on listen_address ("host:port", port 0 = any free one). Up to
 * queue_len messages wait (senders block beyond that); payloads over
 * max_message bytes (0: 1 GiB) are refused. *addr gets the address bound
 * (free with mc_free). A handle, or 0 with *err set. */
uint64_t mc_rpc_server_start(const char *listen_address, int queue_len,
                             uint64_t max_message, char **addr, char **err);

/* Wait up to timeout_ms for the next message: 1 with *kind, *source (the
 * sender's address) and *data (*len bytes; free both with mc_free), 0 on a
 * timeout, -1 once the server is stopped (or a bad handle). */
int mc_rpc_server_next(uint64_t server, int timeout_ms, int *kind,
                       char **source, void **data, uint64_t *len);

/* Stop the server: it refuses new messages, drops queued ones and wakes
 * waiting mc_rpc_server_next calls. Always 0. */
int mc_rpc_server_stop(uint64_t server);

/* The server's connection counts in the Prometheus text format
 * (mooncake_te_rpc_connections, mooncake_te_rpc_refused_connections_total,
 * mooncake_te_rpc_idle_closed_total). Not upstream's. Free with mc_free;
 * NULL with mc_last_error set for a bad (or stopped) handle. */
char *mc_rpc_server_metrics_text(uint64_t server);

/* A client keeping up to pool_size idle connections per target; every send
 * is bounded by timeout_ms. */
uint64_t mc_rpc_client_create(int pool_size, int timeout_ms);

/* Send len bytes at data with kind to the server at target ("host:port");
 * 0 once queued there, else a negative number (-1 for most failures) with
 * *err set (free with mc_free). */
int mc_rpc_client_send(uint64_t client, const char *target, int kind,
                       const void *data, uint64_t len, char **err);

/* Close the client's connections and the handle. Always 0. */
int mc_rpc_client_close(uint64_t client);

/* ---- KV store client ------------------------------------------------- *
 * Store results use upstream Mooncake Store error numbers: -600 invalid
 * params, -704 object not found, -706 object has lease, -707 lease expired,
 * -200 no available handle (no space), -800 transfer fail, -801 checksum
 * mismatch, -900 RPC fail, ... Arrays of keys are arrays of n C strings. */

/* Create a store handle; it does nothing until mc_store_setup. */
uint64_t mc_store_create(void);

/* The arguments of mc_store_setup (upstream setup's). */
typedef struct mc_store_setup_args {
  const char *local_hostname;     /* "host" or "host:port"                 */
  const char *metadata_server;    /* the engine's metadata server          */
  uint64_t global_segment_size;   /* bytes mounted for other clients       */
  uint64_t local_buffer_size;     /* the local staging buffer, bytes       */
  const char *protocol;           /* "tcp" ("rdma"/"efa" fall back to it)  */
  const char *device_name;        /* NIC filter ("" none)                  */
  const char *master_server_addr; /* "host:port" or "etcd://h1:p1;h2:p2"   */
  uint64_t engine;                /* an initialized mc_engine, 0: our own  */
  const char *tenant_id;          /* "" or "default": the default tenant   */
  uint64_t hugepage_size;         /* 2 MiB or 1 GiB; 0: normal pages       */
} mc_store_setup_args;

/* Set the client up (upstream setup) as args describes: start or share a
 * Transfer Engine (args->engine != 0: an initialized mc_engine handle),
 * allocate the local staging buffer, connect to the master and mount
 * global_segment_size bytes. protocol "rdma"/"efa" falls back to tcp (see
 * mooncake.h's engine notes); tenant_id goes with every request to the
 * master. hugepage_size puts the local buffer and the segment on huge
 * pages, which the kernel must have reserved (-600 otherwise, the log says
 * how many are missing). 0 or a negative error number (-600 for a NULL
 * args). A closed handle cannot be set up again: create a new one. A given
 * engine is retained until mc_store_close; an engine handle that is not
 * initialized or was destroyed is -600. args is read during the call only.
 */
int mc_store_setup(uint64_t store, const mc_store_setup_args *args);

/* Start the client's disk tier (setup's enable_ssd_offload) in directory
 * path ("": MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, else /data/file_storage),
 * which must exist, be writable and absolute. 0; -600 bad directory, -1300
 * the master runs without --enable_offload, -1012 an unsupported
 * MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR. */
int mc_store_enable_offload(uint64_t store, const char *path);

/* Unmount the disk tier (upstream unmount_local_disk_segment): reads
 * already routed to it are served for grace_seconds more. 0 also without
 * a tier; -600 for a negative grace. */
int mc_store_unmount_local_disk(uint64_t store, int64_t grace_seconds);

/* Disk reads this client's offload server has served. */
int64_t mc_store_offload_rpc_read_count(uint64_t store);

/* Close the client: refuse new calls (-600), wait for the ones running,
 * unmount, release everything (and the retained engine's reference) and
 * the handle. Always 0. */
int mc_store_close(uint64_t store);

/* 0 healthy, 1 not initialized or closed, 2 master unreachable. */
int mc_store_health_check(uint64_t store);

/* Effective local hostname (host:port). Free with mc_free. */
char *mc_store_get_hostname(uint64_t store);

/* Put n objects. Object i is the concatenation of part_counts[i] ranges
 * taken in order from ptrs/sizes (flattened over all objects).
 * config_json: a ReplicateConfig as JSON ({"replica_num":1,...}) or NULL.
 * flags: 1 upsert (overwrite), 2 zero-copy (use the caller's memory
 * directly; otherwise bytes are staged through the local buffer).
 * results[i] gets 0 or an error number; returns the first non-zero one.
 * A plain put of an existing key succeeds without overwriting. */
int mc_store_put(uint64_t store, int n, const char **keys,
                 const int *part_counts, const uint64_t *ptrs,
                 const uint64_t *sizes, const char *config_json, int flags,
                 int *results);

/* Read n objects into caller memory: object i is scattered in order over
 * part_counts[i] ranges (flattened ptrs/sizes). results[i] gets the
 * object's size, or an error number (-600 if the ranges are too small).
 * zero_copy != 0 reads straight into the ranges. */
void mc_store_get_into(uint64_t store, int n, const char **keys,
                       const int *part_counts, const uint64_t *ptrs,
                       const uint64_t *sizes, int zero_copy,
                       int64_t *results);

/* Read n objects into memory the library allocates: out_ptrs[i] (free with
 * mc_free) holds results[i] bytes; on error results[i] is negative and
 * out_ptrs[i] is 0. */
void mc_store_get(uint64_t store, int n, const char **keys,
                  uint64_t *out_ptrs, int64_t *results);

/* Where mc_store_get_with_allocator puts the index-th key's object of size
 * bytes: the address of size writable bytes, or 0 (the key then fails with
 * -1 INTERNAL_ERROR). Called once per key found, from library threads,
 * possibly several at once, before the call returns. */
typedef uint64_t (*mc_store_alloc_fn)(int index, uint64_t size);

/* Read n objects into memory the caller allocates once each size is known
 * (a copying get without an intermediate buffer). results[i]: bytes read
 * or an error number; alloc NULL is -600 for every key. */
void mc_store_get_with_allocator(uint64_t store, int n, const char **keys,
                                 mc_store_alloc_fn alloc, int64_t *results);

/* Where mc_store_get_sized puts objects: for each i in [first,
 * first + count), sizes[i] is the i-th key's object size, or -1 where that
 * key is not read (its result says why); set addrs[i] (0 on entry) to the
 * address of sizes[i] writable bytes, or leave it 0 to fail the key with
 * -1 INTERNAL_ERROR. Neither array may be kept. For a client set up in
 * process (with or without the local hot cache) it is called once per
 * call, with first 0 and count n, on the thread that called
 * mc_store_get_sized, before any object is read; a dummy client calls it
 * once per key found (count 1), on that thread too. */
typedef void (*mc_store_alloc_all_fn)(int first, int count,
                                      const int64_t *sizes, uint64_t *addrs);

/* A copying get like mc_store_get_with_allocator whose memory is asked for
 * once for the whole batch (see mc_store_alloc_all_fn). results[i]: bytes
 * read or an error number; alloc NULL is -600 for every key. */
void mc_store_get_sized(uint64_t store, int n, const char **keys,
                        mc_store_alloc_all_fn alloc, int64_t *results);

/* Ranged reads: sizes[i] bytes at src_offsets[i] of object keys[i] into
 * dsts[i]. results[i]: bytes read or an error (-600 past the end). */
void mc_store_get_ranges(uint64_t store, int n, const char **keys,
                         const uint64_t *dsts, const uint64_t *src_offsets,
                         const uint64_t *sizes, int64_t *results);

/* results[i]: 1 exists, 0 not, or an error number. Grants read leases. */
void mc_store_exist(uint64_t store, int n, const char **keys, int *results);

/* mc_store_exist of one key: 1 exists, 0 not, or an error number. */
int mc_store_is_exist(uint64_t store, const char *key);

/* Size of an object, or an error number. */
int64_t mc_store_get_size(uint64_t store, const char *key);

/* Replica descriptors of n objects, as JSON (free with mc_free): an array
 * with, per key, either {"replicas": [{"status": 3, "size": N,
 * "buffer_address": A, "transport_endpoint": "host:port"}, ...]} or
 * {"error_code": N}. Grants read leases, as a get does. NULL if the
 * handle is not set up. */
char *mc_store_replica_desc(uint64_t store, int n, const char **keys);

/* Remove n objects; leased ones only with force. results[i]: 0 or error. */
void mc_store_remove(uint64_t store, int n, const char **keys, int force,
                     int *results);

/* Remove objects whose key matches the RE2 pattern; count or error. */
int64_t mc_store_remove_by_regex(uint64_t store, const char *pattern,
                                 int force);

/* Remove every removable object; count or error. */
int64_t mc_store_remove_all(uint64_t store, int force);

/* Register caller memory for zero-copy calls; 0 or -600. */
int mc_store_register_buffer(uint64_t store, uint64_t ptr, uint64_t size);

/* Withdraw memory registered with mc_store_register_buffer; 0 or -600. */
int mc_store_unregister_buffer(uint64_t store, uint64_t ptr);

/* ---- KV store client: dummy mode (a standalone mooncake_client) ------ *
 * A handle set up with mc_store_setup_dummy forwards the calls above (put,
 * get, ranges, exist, size, remove, register) to a mooncake_client daemon
 * on this host; bulk data moves through shared memory the daemon maps.
 * Segment, session, task and replica-descriptor calls are not served for
 * it: they fail as on a handle that is not set up. */

/* Connect to the daemon at server_address ("host:port", the daemon's
 * --port), pass it a shared local buffer of local_buffer_size bytes
 * (0: none; copying calls then fail with -600) and join the worker scope
 * `scope` (hot cache domain, required). A non-empty keyspace must equal
 * the daemon's --tenant_id. 0, -600 (bad arguments, keyspace mismatch,
 * a handle already set up) or -900 (no daemon). */
int mc_store_setup_dummy(uint64_t store, const char *server_address,
                         uint64_t local_buffer_size, const char *scope,
                         const char *keyspace);

/* Shared memory of size bytes for mc_store_register_buffer (dummy mode);
 * its address, or 0 on failure or on a handle not in dummy mode. */
uint64_t mc_store_alloc_from_mem_pool(uint64_t store, uint64_t size);

/* mc_store_register_buffer for memory the caller knows the file of: size
 * bytes at ptr are bytes [offset, offset+size) of the shared file fd (a
 * memfd), which is passed to the daemon (fd stays the caller's). 0, -600
 * (bad range, not in dummy mode), -900 (no daemon). */
int mc_store_dummy_register_fd(uint64_t store, uint64_t ptr, uint64_t size, int fd,
                               uint64_t offset);

/* The dummy client's metrics (and its scope's hot cache counters) in
 * Prometheus' text format, malloc'd (free with mc_free); NULL on a handle
 * not in dummy mode. */
char *mc_store_dummy_metrics(uint64_t store);

/* ---- KV store client: sessions (layer-wise loading) ------------------ *
 * A session start asks the master once per key; ranged calls then move
 * bytes without asking it again. Span arrays are flattened over the keys:
 * key i has span_counts[i] spans (ptrs[j], sizes[j], offsets[j]), each
 * sizes[j] bytes at object offset offsets[j]. Ranged results are bytes
 * moved or an error number. */

/* Open read sessions: results[i] 0, the master's error (-704 ...), -707
 * lease already expired, -702 no complete replica. */
void mc_store_get_session_start(uint64_t store, int n, const char **keys,
                                int *results);

/* Read spans of objects with a read session into caller memory:
 * -600 no session or a span past the end, -707 lease expired (the session
 * is dropped), -800 no replica could be read. */
void mc_store_get_session_ranges(uint64_t store, int n, const char **keys,
                                 const int *span_counts, const uint64_t *ptrs,
                                 const uint64_t *sizes,
                                 const uint64_t *src_offsets,
                                 int64_t *results);

/* Drop read sessions; 0, or -1 for a handle that is not set up. */
int mc_store_get_session_end(uint64_t store, int n, const char **keys);

/* Open write sessions: reserve sizes[i] bytes per key (PutStart) with
 * config_json as mc_store_put's. results[i]: 0, -600 (size 0, a session
 * already open), or the master's error (-705, -200, ...). */
void mc_store_put_session_start(uint64_t store, int n, const char **keys,
                                const uint64_t *sizes,
                                const char *config_json, int *results);

/* Write spans of caller memory into objects with a write session, at
 * their offsets: -600 no session or a span past the object's end; a
 * failed transfer's error makes mc_store_put_session_end revoke. */
void mc_store_put_session_ranges(uint64_t store, int n, const char **keys,
                                 const int *span_counts, const uint64_t *ptrs,
                                 const uint64_t *sizes,
                                 const uint64_t *dst_offsets,
                                 int64_t *results);

/* Wait for each session's writes, then publish (PutEnd) or, after a failed
 * write, revoke. results[i]: 0 or an error (-600 no session). */
void mc_store_put_session_end(uint64_t store, int n, const char **keys,
                              int *results);

/* Wait for each session's writes, then cancel it (PutRevoke). */
void mc_store_put_session_revoke(uint64_t store, int n, const char **keys,
                                 int *results);

/* ---- KV store client: replica management ----------------------------- */

/* Clear this client's objects among keys (segment "" : whole objects, all
 * replicas COMPLETE; otherwise only their replicas on that segment).
 * Leased objects and other clients' objects are skipped. cleared[i] gets
 * 1 or 0. Returns 0 or an error number. */
int mc_store_replica_clear(uint64_t store, int n, const char **keys,
                           const char *segment, int *cleared);

/* Create a task copying key to the n segments named in targets (or moving
 * its replica on segment source to target). The client holding the source
 * replica executes it. *id_hi, *id_lo get the task id. 0 or an error:
 * -704 missing key, -600 unknown segment or move to the same segment. */
int mc_store_create_copy_task(uint64_t store, const char *key, int n,
                              const char **targets, uint64_t *id_hi,
                              uint64_t *id_lo);
int mc_store_create_move_task(uint64_t store, const char *key,
                              const char *source, const char *target,
                              uint64_t *id_hi, uint64_t *id_lo);

/* A task as JSON (free with mc_free): {"error_code": 0, "id_hi", "id_lo",
 * "type" (0 copy, 1 move), "status" (0 PENDING, 1 PROCESSING, 2 SUCCESS,
 * 3 FAILED), "created_at_ms_epoch", "last_updated_at_ms_epoch",
 * "assigned_client", "message"}, or {"error_code": N} (-1400 unknown). */
char *mc_store_query_task(uint64_t store, uint64_t id_hi, uint64_t id_lo);

/* ---- KV store client: segments mounted after setup, local buffer ----- *
 * Where a function takes `char **err`, a failure stores a message there
 * (free with mc_free) when err is not NULL. */

/* Map size bytes of the file at path from offset (page-aligned), shared,
 * and mount them as a segment. *ids gets the new segment ids, separated by
 * newlines (free with mc_free). protocol: "" or "tcp". location: placement
 * hint of the memory ("" = "*"). 0 or an error number. */
int mc_store_mount_segment(uint64_t store, const char *path, uint64_t size,
                           uint64_t offset, const char *protocol,
                           const char *location, char **ids, char **err);

/* Allocate size bytes (rounded up to 16 MiB) and mount them; *allocated
 * gets the rounded size, *ids the segment ids as above. location: "", "*"
 * or "cpu". 0 or an error number. */
int mc_store_allocate_and_mount_segment(uint64_t store, uint64_t size,
                                        const char *protocol,
                                        const char *location,
                                        uint64_t *allocated, char **ids,
                                        char **err);

/* Unmount n segments and release their memory: ones from
 * mc_store_mount_segment (allocated == 0) or from
 * mc_store_allocate_and_mount_segment (allocated != 0). Every id is
 * processed; returns 0 or the first error (-101 unknown id).
 * grace_seconds must be 0 (no grace period: -600). */
int mc_store_unmount_segment(uint64_t store, const char **ids, int n,
                             int64_t grace_seconds, int allocated,
                             char **err);

/* Store-RS fleet calls (docs/store-operations.md). Errors are numbers as
 * above; *err (when err is not NULL) gets the message, free with mc_free.
 *
 * Set the namespace, routed-write and eviction-watermark options (a JSON
 * object, client.FleetConfig) for the next mc_store_setup of this handle. */
int mc_store_set_fleet_options(uint64_t store, const char *options_json,
                               char **err);

/* The ids of the client's mounted segments, newline-separated, in *ids
 * (free with mc_free). */
int mc_store_segment_ids(uint64_t store, char **ids);

/* Put n segments (all of the client's when n == 0) in mode: 0 ACTIVE,
 * 1 STANDBY, 2 DRAINING, 3 RETIRED (final). */
int mc_store_set_segment_mode(uint64_t store, const char **ids, int n,
                              int mode, char **err);

/* Move the replicas off n segments (all when n == 0) and wait until they
 * are empty, at most timeout_ms: op 0 evacuates (segments not ACTIVE),
 * 1 drains (DRAINING, then evacuates), 2 retires one segment (RETIRED,
 * evacuated, unmounted). *report gets a JSON summary. */
int mc_store_evacuate(uint64_t store, int op, const char **ids, int n,
                      int64_t timeout_ms, char **report, char **err);

/* A dry run of evacuating n segments (all when n == 0): *plan gets JSON
 * {items: [{key, size, from_segment, to_segment, to_owner,
 * other_replicas}], objects, bytes, unplaceable}. */
int mc_store_plan_handoff(uint64_t store, const char **ids, int n,
                          char **plan, char **err);

/* Tracing: open the span sinks (process-wide) that settings_json names
 * ({"text", "text_file", "jsonl_file", "key_mode"}: the values of
 * MC_STORE_RS_TRACE, _TRACE_FILE, _TRACE_JSONL_FILE, _TRACE_KEY_MODE);
 * NULL reads them from the environment as the runtime saw it at start.
 * *status (when not NULL) gets JSON of where spans go. */
int mc_store_init_tracing(const char *settings_json, char **status,
                          char **err);

/* The client's span breakdown: Prometheus text / JSON (free with mc_free;
 * NULL for a handle not set up). */
char *mc_store_metrics_text(uint64_t store);
char *mc_store_breakdown(uint64_t store);

/* Serve /metrics, /breakdown and /tracing on addr (port 0: a free one);
 * *bound gets the address. Stop: 0, or 1 when none ran. The address is ""
 * when none runs. */
int mc_store_start_metrics_server(uint64_t store, const char *addr,
                                  char **bound, char **err);
int mc_store_stop_metrics_server(uint64_t store);
char *mc_store_metrics_server_address(uint64_t store);

/* The registered local buffer: *base and *size (0, 0 without one). 0 or
 * -600 for a handle that is not set up. */
int mc_store_local_buffer(uint64_t store, uint64_t *base, uint64_t *size);

/* Take size bytes of the local buffer, aligned to align (a power of two,
 * at least 64), without waiting; 0 when they are not free. The memory is
 * registered already (zero-copy puts and gets need nothing more). */
uint64_t mc_store_local_alloc(uint64_t store, uint64_t size, uint64_t align);

/* Return memory from mc_store_local_alloc; 0, or -600 if ptr is not the
 * start of a live allocation. */
int mc_store_local_free(uint64_t store, uint64_t ptr);

/* ---- Collectives (backend "mooncake"; owned by backend/) ------------- */
/*
 * One process-wide collectives runtime. Status results: 0 ok, -1 invalid
 * request (nothing was communicated; the group stays usable), -2 peer
 * failure, -3 group destroyed, -4 group broken by an earlier failure,
 * -5 other. Where a function takes `char **err`, a failure stores a message
 * there (malloc'd; free with mc_free) unless err is NULL.
 */

/* Rendezvous store callbacks (the torch c10d::Store, adapted by the caller).
 * set returns 0 on success. get waits up to timeout_ms for key, copies at
 * most cap bytes of its value into buf and returns the value's length, or
 * -1 on failure; with timeout_ms 0 it must not wait (the runtime calls it
 * so on the path of collectives): -1 unless the key exists now. */
typedef int (*mc_pg_store_set_fn)(void *ctx, const char *key,
                                  const char *value, uint64_t len);
typedef int64_t (*mc_pg_store_get_fn)(void *ctx, const char *key, char *buf,
                                      uint64_t cap, int64_t timeout_ms);
/* add adds delta to the integer under key (0 when absent), atomically,
 * stores the sum in *value and returns 0, or -1 on failure. It is how a
 * coordinator failover claims its term; the store (ctx) must stay valid
 * until the group is destroyed, since a failover may use it at any time. */
typedef int (*mc_pg_store_add_fn)(void *ctx, const char *key, int64_t delta,
                                  int64_t *value);

/* Completion callback of a submitted op: called exactly once, with the
 * status and (if it failed) a message valid only during the call, on a
 * runtime thread (or on the submitting thread if the op completed first).
 * failed has bit r set for each in-group rank r that failed during the op
 * (the caller's own bit: it was itself left out of the group): a peer's
 * death does not fail the op (status 0); the op completed without it
 * (docs/collectives-faults.md, "Fault tolerance"). epoch is the group's view
 * epoch (mc_pg_group_view) as the op completed: a caller that mirrors the
 * view reads it again only when the epoch moved. ran has bit r set for
 * each in-group rank a collective ran over (as it last ran; 0 for a
 * point-to-point op and a collective that did not run): the slots whose
 * blocks of a per-rank output it wrote. The view as the op completes may
 * already lack a rank whose block the op did write (the rank died at the
 * op's end, after giving its data). */
typedef void (*mc_pg_done_fn)(void *ctx, int status, const char *message,
                              uint64_t failed, uint64_t epoch, uint64_t ran);

/* Op kinds (mc_pg_op.kind). */
enum {
  MC_PG_ALLREDUCE = 1,      /* out: count elements, reduced in place      */
  MC_PG_BROADCAST = 2,      /* out: out_bytes from rank root               */
  MC_PG_ALLGATHER = 3,      /* in -> out (size * in_bytes, rank order)     */
  MC_PG_REDUCE_SCATTER = 4, /* in: size blocks of count -> out: count      */
  MC_PG_ALLTOALL = 5,       /* in/out packed per rank; send/recv_bytes[count] */
  MC_PG_REDUCE = 6,         /* out: count elements, result on root         */
  MC_PG_GATHER = 7,         /* in -> out (root only)                       */
  MC_PG_SCATTER = 8,        /* in (root only) -> out                       */
  MC_PG_BARRIER = 9,
  MC_PG_SEND = 10,          /* in to rank root                             */
  MC_PG_RECV = 11           /* out from rank root                          */
};

/* One operation. dtype is a c10::ScalarType number and reduce_op a
 * c10d::ReduceOp::RedOpType number (used by reducing ops only); count is
 * in elements of dtype (for MC_PG_ALLTOALL: the number of entries of
 * send_bytes and recv_bytes, the world size the caller validated
 * against), sizes elsewhere in bytes. Buffers are contiguous and must stay
 * valid until the completion callback. */
typedef struct mc_pg_op {
  int32_t kind;
  int32_t dtype;
  int32_t reduce_op;
  int32_t root; /* root rank, or the peer of SEND/RECV */
  void *in;
  void *out;
  uint64_t in_bytes;
  uint64_t out_bytes;
  uint64_t count;
  const uint64_t *send_bytes;
  const uint64_t *recv_bytes;
  int32_t flags; /* MC_PG_OP_SYNC */
} mc_pg_op;

/* mc_pg_op.flags: the caller waits for the op right away. The op then runs
 * on the calling thread when the group has nothing queued (done is called
 * before mc_pg_submit returns), saving two thread hand-offs. */
#define MC_PG_OP_SYNC 1

/* Process-wide settings; host IP and device filter only before the first
 * group. The host IP (the address the rank publishes) defaults to
 * MC_PG_HOST_IP, else the local address of the route to MASTER_ADDR, else
 * 127.0.0.1; a loopback or wildcard one while MASTER_ADDR is not loopback
 * fails the first mc_pg_group_create. set_transfer_engine uses an initialised engine handle (0: create
 * our own) and retains it until it is replaced or cleared, so the caller
 * may destroy its handle meanwhile. Timeouts: after how long a waiting op probes its peer (it keeps
 * waiting while the peer answers); p2p 0 means the default (10 s). */
int mc_pg_set_host_ip(const char *ip, char **err);
int mc_pg_set_device_filter(const char *const *names, int n, char **err);
int mc_pg_set_transfer_engine(uint64_t engine, char **err);
int mc_pg_set_collective_timeout_us(int64_t us, char **err);
int mc_pg_set_p2p_timeout_us(int64_t us, char **err);
/* How long a failure reconciliation waits at most for every active rank of
 * the group (default 30 s; it ends as soon as all took part). */
int mc_pg_set_fault_reconciliation_window_us(int64_t us, char **err);
/* How long a collective waits for a rank that answers probes but has not
 * entered the collective before that rank is failed (0, the default unless
 * MC_PG_HANG_TIMEOUT_MS says otherwise: never). */
int mc_pg_set_hang_timeout_us(int64_t us, char **err);

/* mc_pg_group_create flags: auto_deactivate_on_failure off (a failed peer
 * is left out of the op it failed in but stays in the active mask), and
 * is_extension (join an existing group: as a new rank in one of its empty
 * slots, or as the replacement of a member that died, was excluded or
 * left). */
#define MC_PG_GROUP_MANUAL 1
#define MC_PG_GROUP_EXTENSION 2

/* Join group group_id as rank of size, in a group of max_size slots
 * (max_size <= 0: size; at most 64). The first group of the process
 * bootstraps through the store (rank 0 publishes "coordinator_addr").
 * Founders (no MC_PG_GROUP_EXTENSION) block until every founder joined
 * (MC_PG_INIT_TIMEOUT, default 300 s) and start active; creation is all
 * or nothing: if any founder fails to set the group up (open the others'
 * segments), every founder gets the same error. An extension
 * attaches to the existing group as an inactive, isolated member (its
 * collectives run over itself only) until mc_pg_join_group; while the
 * slot is still held by a live member it retries for up to 30 s.
 * add may be NULL: the runtime then cannot replace a lost coordinator
 * (docs/collectives.md, "Coordinator failover"); with it, the first group
 * of the process is the one whose store a failover goes through.
 * flags: MC_PG_GROUP_MANUAL | MC_PG_GROUP_EXTENSION or 0. Returns the group
 * handle, or 0 with *err set. */
uint64_t mc_pg_group_create(int rank, int size, int max_size,
                            const char *group_id, void *store_ctx,
                            mc_pg_store_set_fn set, mc_pg_store_get_fn get,
                            mc_pg_store_add_fn add, int32_t flags, char **err);

/* The group's size as torch sees it (upstream's slot semantics): the
 * highest active slot + 1; the declared size while this rank is isolated
 * (an extension not yet activated) or quiescing (in mc_pg_join_group).
 * -1 for an unknown handle. */
int mc_pg_group_world_size(uint64_t group);

/* join_group: quiesce (new ops are refused), drain this rank's queued ops,
 * announce that it is ready, and block until a member activates it
 * (mc_pg_propose), at most 300 s. Allowed for an isolated extension and
 * for a member whose own slot was deactivated (in-place rejoin). */
int mc_pg_join_group(uint64_t group, char **err);

/* Proposal outcomes (upstream's ProposalStatus). */
enum {
  MC_PG_PROPOSAL_REJECTED = 0,
  MC_PG_PROPOSAL_APPLIED = 1,
  MC_PG_PROPOSAL_APPLIED_WITH_DROPPED_RANKS = 2
};

/* activate_ranks (activate != 0) or deactivate_ranks: propose a view
 * change for the n in-group ranks. Blocks until the coordinator answered:
 * activation waits (at most 20 s) until every target is ready (joined and
 * awaiting activation), then every online rank active before or after the
 * change must apply the new view (20 s); those that do not are dropped
 * (made inactive) and reported. Returns 0 when answered: *status, the new
 * epoch, the dropped ranks as a bitmask and, for a rejection, *reason
 * (malloc'd, free with mc_free; NULL when there is none). */
int mc_pg_propose(uint64_t group, int activate, const int32_t *ranks, int n,
                  int32_t *status, uint64_t *new_epoch, uint64_t *dropped,
                  char **reason, char **err);

/* sync_after_failure outcomes (upstream's SyncAfterFailureStatus). */
enum {
  MC_PG_SYNC_RECONCILED = 0,
  MC_PG_SYNC_NO_PENDING = 1,
  MC_PG_SYNC_REJECTED = 2
};

/* sync_after_failure: take part in the group's pending failure
 * reconciliation (if one is open) and apply the current view. *status:
 * RECONCILED when a failure was reconciled since this rank's last call (or
 * by this call), NO_PENDING otherwise, REJECTED (with *reason) when this
 * rank is not a member. */
int mc_pg_sync_after_failure(uint64_t group, int32_t *status, char **reason,
                             char **err);

/* get_peer_state: out[i] = 1 when in-group rank ranks[i] is healthy,
 * active or awaiting activation, and has published its endpoint (from the
 * local view, no communication), else 0. */
int mc_pg_peer_state(uint64_t group, const int32_t *ranks, int n,
                     int32_t *out, char **err);

/* get_num_synced_ranks: the number of slots that could be active now
 * (healthy, active or awaiting activation, endpoint published); -1 for an
 * unknown handle. */
int mc_pg_num_synced_ranks(uint64_t group);

/* The group's membership view (the active_ranks mirror): writes 1 (active)
 * or 0 for each of the first n slots into active (if non-NULL; only this
 * rank while it is isolated or joining) and the epoch into *epoch (if
 * non-NULL). Returns the number of slots, or -1 for an unknown handle. */
int mc_pg_group_view(uint64_t group, int32_t *active, int n, uint64_t *epoch);

/* Make the runtime write the group's active_ranks mirror (as
 * mc_pg_group_view's active) into the n int32s at mirror now and the
 * moment each later view is applied, from a runtime thread (each element
 * a single aligned store). The memory must stay valid until the group is
 * destroyed or this is called again (NULL stops the writes). */
int mc_pg_group_set_mirror(uint64_t group, int32_t *mirror, int n, char **err);

/* Destroy a group, whichever threads still use it: new ops on the handle
 * fail with -3; every op in flight (queued, running, or running inline on
 * another thread's mc_pg_submit) gives up its waits and completes with -3
 * (one already past its last wait completes normally), and this returns
 * only once all of them have completed, their callbacks included; only then
 * is the group's memory released. Must not be called from an op's
 * completion callback. Destroying a destroyed handle does nothing. */
void mc_pg_group_destroy(uint64_t group);

/* Test only: make this rank's transfers to in-group rank peer fail (fail
 * != 0: as a broken link would) or work again. Refused unless the
 * environment has MC_TE_FAULT_INJECTION=1. */
int mc_pg_inject_link_failure(uint64_t group, int peer, int fail, char **err);

/* Size in bytes of the group's collective slots (staging chunk), or -1. */
int64_t mc_pg_group_slot_bytes(uint64_t group);

/* Validate and queue op. 0: queued, done will be called exactly once.
 * Otherwise nothing was queued, done is not called, and *err says why. */
int mc_pg_submit(uint64_t group, const mc_pg_op *op, mc_pg_done_fn done,
                 void *ctx, char **err);

/* ---- MoE expert parallelism (mooncake.mooncake_ep_buffer) ----------- */
/* Notation: R ranks, E experts, L = E/R, N max tokens per rank, H hidden,
 * T local tokens, K top-k. Tensors are raw pointers to contiguous memory.
 * Failures: -1 (bad arguments, unknown handle), -202 (buffer closed) or a
 * transfer's error number; the message also goes to *err (if err is
 * non-NULL; free with mc_free). */

/* Upstream's get_ep_buffer_size_hint: 16*E + 8*E*N*(16+H) bytes. */
int64_t mc_ep_size_hint(int64_t n, int64_t h, int64_t num_ranks, int64_t e);

/* Create rank's EP buffer of nbytes (memfd memory peers on the host map)
 * with its own Transfer Engine (P2PHANDSHAKE metadata; local_hostname is
 * the address peers reach it at; NULL/"": the local address of the route
 * to MASTER_ADDR, 127.0.0.1 without it; a loopback or wildcard one while
 * MASTER_ADDR is not loopback fails). disable_p2p != 0:
 * TCP even to same-host peers. 0 on failure. */
uint64_t mc_ep_buffer_create(int rank, int num_ranks, int64_t nbytes,
                             const char *local_hostname, int disable_p2p,
                             char **err);

/* What this rank publishes at rendezvous, as JSON {"name":..,"addr":..}.
 * Free with mc_free; NULL for an unknown handle. */
char *mc_ep_buffer_self(uint64_t buf);

/* Connect to every rank: peers_json is a JSON array of the R objects from
 * mc_ep_buffer_self, indexed by rank. Calling it again (update_ep_member)
 * reconnects and clears all signals. */
int mc_ep_buffer_connect(uint64_t buf, const char *peers_json, char **err);

/* Close the buffer and release the handle: new calls fail (-202),
 * pending receives are canceled (their mc_ep_op_wait returns -202; the
 * output memory holds whatever had arrived), running sends are waited for,
 * then the buffer and its engine are freed. */
void mc_ep_buffer_destroy(uint64_t buf);

/* Modes of mc_ep_dispatch / mc_ep_combine (the args' mode field). */
enum {
  MC_EP_SYNC = 0,  /* send and receive before returning                     */
  MC_EP_HOOK = 1,  /* send now, receive in mc_ep_op_wait (recv hook)         */
  MC_EP_ASYNC = 2  /* send now, receive on a background thread; complete
                      with mc_ep_op_wait (async_finish)                      */
};

/* What every dispatch and combine has: its mode, shape and liveness.
 * active (int32[R], 1 = alive) is updated in place: a rank that misses
 * timeout_us (-1: wait forever) is set to 0. */
typedef struct mc_ep_call { /* the first member of both argument structs */
  int32_t mode;          /* MC_EP_SYNC, MC_EP_HOOK or MC_EP_ASYNC */
  int64_t num_tokens;    /* T */
  int64_t top_k;         /* K */
  int64_t max_tokens;    /* N, per rank (the dispatch's, for a combine) */
  int64_t hidden;        /* H, a multiple of 128 */
  int64_t num_experts;   /* E, a multiple of R */
  int64_t timeout_us;
  int32_t *active;
} mc_ep_call;

/* One dispatch: the caller's tokens go to the ranks owning their top-k
 * experts. Inputs: x bf16[T,H], topk_idx int64[T,K] (-1 = none). Outputs:
 * recv_x [L,R*N,H] (bf16, or e4m3 when fp8), recv_scales float32 stored
 * [L,H/128,R*N] (fp8 only, else NULL), recv_count int32[L], src_info
 * int32[L,R*N], layout_range int64[L,R] = (begin<<32)|count. */
typedef struct mc_ep_dispatch_args {
  mc_ep_call call;
  int32_t fp8;           /* != 0: e4m3 recv_x with recv_scales */
  const void *x;
  const int64_t *topk_idx;
  void *recv_x;
  float *recv_scales;
  int32_t *recv_count;
  int32_t *src_info;
  int64_t *layout_range;
} mc_ep_dispatch_args;

/* One combine: x bf16[L,R*N,H] expert outputs in the dispatch layout,
 * topk_idx int64[T,K], topk_weights float32[T,K], src_info/layout_range
 * from the dispatch; out bf16[T,H] = sum_k w*y (float32 accumulation,
 * terms of inactive owners dropped). */
typedef struct mc_ep_combine_args {
  mc_ep_call call;
  const void *x;
  const int64_t *topk_idx;
  const float *topk_weights;
  const int32_t *src_info;
  const int64_t *layout_range;
  void *out;
} mc_ep_combine_args;

/* Run a dispatch / combine as args describes. In modes MC_EP_HOOK and
 * MC_EP_ASYNC *op_out gets the operation handle, and every pointer of
 * args must stay valid until mc_ep_op_wait returns (args itself is read
 * during the call only). */
int mc_ep_dispatch(uint64_t buf, const mc_ep_dispatch_args *args,
                   uint64_t *op_out, char **err);
int mc_ep_combine(uint64_t buf, const mc_ep_combine_args *args,
                  uint64_t *op_out, char **err);

/* Complete (mode 1) or wait for (mode 2) an operation; frees its handle.
 * -202 when the buffer's destroy canceled it (the handle is freed too). A
 * recv hook called out of order fails and stays pending. */
int mc_ep_op_wait(uint64_t op, char **err);

/* 1 when an async operation's receive has finished (or the handle is
 * unknown), 0 otherwise (always 0 for a pending recv-hook operation). */
int mc_ep_op_done(uint64_t op);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_H */
