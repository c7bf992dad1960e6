/*
 * cgo.h - what every cgo preamble in capi/ includes (not installed).
 *
 * It brings in mooncake.h, the ABI's one declaration: cgo compiles its own
 * prototype of every //export together with the preambles, so an export
 * whose Go signature differs from its mooncake.h declaration fails the
 * build ("conflicting types").
 *
 * cgo cannot spell const, so these aliases carry it: an export takes
 * *C.mc_cchar where mooncake.h has `const char *`. In Go each alias is the
 * unqualified type (*C.mc_cchar is *C.char), so no conversion is needed.
 */
#ifndef MC_CAPI_CGO_H
#define MC_CAPI_CGO_H

#include <stdint.h>
#include <stdlib.h>

#include "mooncake.h"

typedef const char mc_cchar;          /* const char        */
typedef const char *const mc_ccstr;   /* const char *const */
typedef const void mc_cvoid;          /* const void        */
typedef const int mc_cint;            /* const int         */
typedef const int32_t mc_ci32;        /* const int32_t     */
typedef const uint64_t mc_cu64;       /* const uint64_t    */
typedef const mc_pg_op mc_cpg_op;     /* const mc_pg_op    */
typedef const mc_ep_dispatch_args mc_cep_dispatch_args;
typedef const mc_ep_combine_args mc_cep_combine_args;
typedef const mc_store_setup_args mc_cstore_setup_args;

/* last_error.c: the calling thread's last error. set takes ownership of
 * msg (malloc'd); last returns a malloc'd copy ("" when none). */
void mc_capi_set_last_error(char *msg);
char *mc_capi_last_error(void);

#endif /* MC_CAPI_CGO_H */
