/*
 * mooncake.h - the C ABI of Mooncake-Go (libmooncake.so).
 *
 * One shared library per process: Python (ctypes) and the torch plugin load
 * this same file. Conventions:
 *   - Objects are opaque uint64_t handles; 0 is never a valid handle.
 *   - Strings are NUL-terminated UTF-8. A returned char* is malloc'd and must
 *     be released with mc_free(); NULL means "no value".
 *   - int results: 0 on success, otherwise a negative upstream error number
 *     (Transfer Engine: -1 invalid argument, -2 too many requests,
 *     -3 address not registered, -4 batch busy, -7 address overlapped,
 *     -102 socket, -103 malformed JSON, -104 handshake rejected,
 *     -200 metadata, -202 context/timeout, -302 memory, -303 not implemented).
 *     mc_engine_last_error() gives the message of an engine's last failure.
 *   - Addresses are absolute virtual addresses in the owning process.
 *   - No function blocks longer than the transfer timeout
 *     (MC_TRANSFER_TIMEOUT seconds, default 30) plus connection set-up.
 */
#ifndef MOONCAKE_H
#define MOONCAKE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Library version string, e.g. "0.1.0". Free with mc_free. */
char *mc_version(void);

/* Release memory returned by this library. */
void mc_free(void *p);

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

/* Stop the engine, withdraw its metadata, free its managed buffers and
 * release the handle. */
void mc_engine_destroy(uint64_t engine);

/* Message of the engine's last failure ("" if none). Free with mc_free. */
char *mc_engine_last_error(uint64_t engine);

/* Port of the handshake (RPC) listener, or -1. */
int mc_engine_get_rpc_port(uint64_t engine);

/* Name peers open this engine's segment by. Free with mc_free. */
char *mc_engine_segment_name(uint64_t engine);

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
 * data. Returns 0 when every transfer completed, else a negative number. */
int mc_engine_transfer_sync(uint64_t engine, const char *target, int opcode,
                            const uint64_t *buffers, const uint64_t *peer_addrs,
                            const uint64_t *lengths, int n,
                            const char *notify_name, const char *notify_msg);

/* Submit n transfers as one batch without waiting. Returns the batch id, or
 * 0 on failure (nothing submitted). */
uint64_t mc_engine_transfer_async(uint64_t engine, const char *target,
                                  int opcode, const uint64_t *buffers,
                                  const uint64_t *peer_addrs,
                                  const uint64_t *lengths, int n);

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

/* Host topology JSON: {"cpu:N": [[preferred NICs], [available NICs]]}. */
char *mc_local_topology(void);

/* ---- KV store client ------------------------------------------------- *
 * Store results use upstream Mooncake Store error numbers: -600 invalid
 * params, -704 object not found, -706 object has lease, -707 lease expired,
 * -200 no available handle (no space), -800 transfer fail, -801 checksum
 * mismatch, -900 RPC fail, ... Arrays of keys are arrays of n C strings. */

/* Create a store handle; it does nothing until mc_store_setup. */
uint64_t mc_store_create(void);

/* Set the client up (upstream setup): start or share a Transfer Engine
 * (engine != 0: an initialized mc_engine handle), allocate the local
 * staging buffer, connect to the master ("host:port" or
 * "etcd://h1:p1;h2:p2" for HA) and mount global_segment_size bytes.
 * 0 or a negative error number. */
int mc_store_setup(uint64_t store, const char *local_hostname,
                   const char *metadata_server, uint64_t global_segment_size,
                   uint64_t local_buffer_size, const char *protocol,
                   const char *device_name, const char *master_server_addr,
                   uint64_t engine);

/* Unmount, release everything and the handle. Always 0. */
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

/* Ranged reads: sizes[i] bytes at src_offsets[i] of object keys[i] into
 * dsts[i]. results[i]: bytes read or an error (-600 past the end). */
void mc_store_get_ranges(uint64_t store, int n, const char **keys,
                         const uint64_t *dsts, const uint64_t *src_offsets,
                         const uint64_t *sizes, int64_t *results);

/* results[i]: 1 exists, 0 not, or an error number. Grants read leases. */
void mc_store_exist(uint64_t store, int n, const char **keys, int *results);

/* Size of an object, or an error number. */
int64_t mc_store_get_size(uint64_t store, const char *key);

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

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_H */
