package main

// #include "cgo.h"
import "C"

import "github.com/mooncake-go/mooncake/internal/tlsconf"

// mc_set_tls_files sets the process's MC_TLS_* variables, which the Go
// side reads from its own copy of the environment: a binding whose
// language changed its environment after this library loaded hands the
// values over here.
//
//export mc_set_tls_files
func mc_set_tls_files(cert, key, ca *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	str := func(p *C.mc_cchar) string {
		if p == nil {
			return ""
		}
		return C.GoString(p)
	}
	tlsconf.Files{CertFile: str(cert), KeyFile: str(key), CAFile: str(ca)}.Export()
	return 0
}
