// Turning libmooncake's error strings (malloc'd, freed with mc_free) into
// torch errors, which pybind11 raises in Python as RuntimeError.
#pragma once

#include <c10/util/Exception.h>

#include <string>

extern "C" {
#include "mooncake.h"
}

namespace mooncake_pg {

// The message libmooncake stored in err (freed here); "unknown error" when
// there is none.
inline std::string takeError(char* err) {
  std::string s = err ? err : "unknown error";
  if (err) {
    mc_free(err);
  }
  return s;
}

// Raises "<what> failed: <message>" unless status is 0. Call as
// `int st = mc_pg_...(..., &err); check(name, st, err);` (argument
// evaluation order would otherwise read err before the call sets it).
inline void check(const char* what, int status, char* err) {
  if (status == 0) {
    return;
  }
  TORCH_CHECK(false, what, " failed: ", takeError(err));
}

}  // namespace mooncake_pg
