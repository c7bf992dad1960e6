package main

// #include "cgo.h"
import "C"

import (
	"os"

	"github.com/mooncake-go/mooncake/internal/envvars"
)

// mc_set_tls_files sets the process's MC_TLS_* variables, which the Go
// side reads from its own copy of the environment: a binding whose
// language changed its environment after this library loaded hands the
// values over here.
//
//export mc_set_tls_files
func mc_set_tls_files(cert, key, ca *C.mc_cchar) (ret C.int) {
	defer recoverTo(&ret, -1)
	for _, v := range []struct {
		name string
		val  *C.mc_cchar
	}{{envvars.TLSCertFile.Name, cert}, {envvars.TLSKeyFile.Name, key}, {envvars.TLSCAFile.Name, ca}} {
		s := ""
		if v.val != nil {
			s = C.GoString(v.val)
		}
		if s != "" {
			_ = os.Setenv(v.name, s)
		} else {
			_ = os.Unsetenv(v.name)
		}
	}
	return 0
}
