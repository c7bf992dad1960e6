package main

/*
#define _GNU_SOURCE
#include <dlfcn.h>
#include "cgo.h"

// mc_own_path is the file this library was loaded from (dladdr of a
// function of its own), or NULL.
static const char *mc_own_path(void) {
	Dl_info info;
	if (dladdr((void *)&mc_own_path, &info) == 0 || info.dli_fname == NULL) {
		return NULL;
	}
	return info.dli_fname;
}
*/
import "C"

import (
	"os"
	"path/filepath"

	"github.com/mooncake-go/mooncake/backend"
)

// libraryDir is the directory libmooncake.so was loaded from, "" if it
// cannot be told.
func libraryDir() string {
	p := C.mc_own_path()
	if p == nil {
		return ""
	}
	abs, err := filepath.Abs(C.GoString(p))
	if err != nil {
		return ""
	}
	return filepath.Dir(abs)
}

// installedCommand finds one of the Go commands installed with the
// library: in the wheel, mooncake/bin/<name> beside mooncake/lib/; in a
// CMake build, build/bin/<name> beside build/libmooncake.so. "" if absent.
func installedCommand(name string) string {
	dir := libraryDir()
	if dir == "" {
		return ""
	}
	for _, p := range []string{filepath.Join(dir, "..", "bin", name), filepath.Join(dir, "bin", name)} {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return filepath.Clean(p)
		}
	}
	return ""
}

func init() { pgRuntime.SetCoordinatorBinary(installedCommand(backend.CoordinatorCommand)) }
