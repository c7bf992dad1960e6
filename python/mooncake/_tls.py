"""The control plane's TLS files, handed to libmooncake.

The Go side reads MC_TLS_CERT_FILE, MC_TLS_KEY_FILE and MC_TLS_CA_FILE
from its own copy of the environment, taken when the library loaded; a
variable set in ``os.environ`` afterwards would not reach it. Every entry
point that connects or listens (store setup, engine initialize, the RPC
interface) calls `apply` first, so ``os.environ`` at that moment, or the
files given to store setup, are what the library uses. The files apply
to the whole process. See docs/security.md, "TLS".
"""

from __future__ import annotations

import os

from mooncake import _lib

NAMES = ("MC_TLS_CERT_FILE", "MC_TLS_KEY_FILE", "MC_TLS_CA_FILE")


def apply(
    cert_file: str | None = None, key_file: str | None = None, ca_file: str | None = None
) -> None:
    """Hand the library the TLS files: each one given, else the
    environment's (unset or empty: none). A file given is also put into
    ``os.environ``, so that later calls (and child processes) keep it.
    Nothing is loaded here; a bad or half configuration fails the
    connection or listener that uses it."""
    cdll = _lib.lib()
    fn = cdll.mc_set_tls_files
    fn.argtypes = [_lib.STR, _lib.STR, _lib.STR]
    fn.restype = _lib.INT
    given = (cert_file, key_file, ca_file)
    for v, n in zip(given, NAMES, strict=True):
        if v is not None:
            os.environ[n] = str(v)
    values = [os.environ.get(n, "") for n in NAMES]
    fn(*(v.strip().encode() for v in values))
