"""Mooncake-Go: the Mooncake stack for PyTorch, implemented in Go.

This import package follows upstream Mooncake's module layout so that it can
replace the upstream ``mooncake`` package: ``mooncake.engine`` (Transfer
Engine), ``mooncake.store`` (distributed KV store for tensors), ``mooncake.pg``
(the ``torch.distributed`` backend ``"mooncake"``) and
``mooncake.mooncake_ep_buffer`` (expert-parallel dispatch/combine). Those
modules are being written; see the README's Status section for what exists.

Everything calls into one native library, ``libmooncake.so``, loaded by
``mooncake._lib``. Importing this package does not import torch. The Go
programs (``mooncake_master``, ``mooncake_http_metadata_server``,
``transfer_engine_bench``) ship inside the package and are installed as
console scripts by ``mooncake.cli``.
"""


def __getattr__(name: str):
    """`mooncake.BufferPool` (= `RegisteredBufferPool`), loaded on first use."""
    if name in ("BufferPool", "RegisteredBufferPool"):
        from mooncake.buffer_pool import BufferPool

        return BufferPool
    raise AttributeError(f"module 'mooncake' has no attribute {name!r}")
