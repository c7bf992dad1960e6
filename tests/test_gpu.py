"""GPU memory support on a machine without CUDA (CI): the host-only path.

Device memory itself is exercised by the Go tests against a fake device
(gpu/gputest) and, on a GPU machine, by scripts/gpu_check.sh. Here: the
pointer classification and copies Python uses say "host" and work without a
driver, CUDA staging is inert for CPU tensors, and the device check's
harness runs its checks on CPU tensors and skips cleanly without CUDA.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent
RUN_CHECKS = REPO / "scripts" / "gpu_check" / "run_checks.py"
NO_CUDA = not torch.cuda.is_available()


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_pointers_are_host_memory_without_a_driver() -> None:
    from mooncake import _device

    buf = ctypes.create_string_buffer(b"mooncake", 64)
    addr = ctypes.addressof(buf)
    assert _device.pointer_kind(addr) == (_device.HOST, -1)
    assert _device.device_of(addr) is None
    assert _device.read(addr, 8) == b"mooncake"
    _device.write(addr + 8, b"-go")
    assert _device.read(addr, 11) == b"mooncake-go"
    dst = ctypes.create_string_buffer(11)
    _device.copy(ctypes.addressof(dst), addr, 11)
    assert dst.raw == b"mooncake-go"


def test_cuda_stage_is_inert_for_cpu_tensors() -> None:
    from mooncake._cuda_stage import CudaStage

    t = torch.arange(6)
    stage = CudaStage(t, None, torch.ones(2))
    assert not stage.active
    assert stage.host(t) is t
    assert stage.output(t) is t
    stage.into(t, t)
    stage.finish()


def test_ep_rejects_tensors_neither_cpu_nor_cuda() -> None:
    from mooncake import mooncake_ep_buffer

    meta = torch.empty(4, 128, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="CPU or CUDA"):
        mooncake_ep_buffer._contig(meta, "x", torch.bfloat16, 2)


def _run_checks(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RUN_CHECKS), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_device_check_skips_without_cuda() -> None:
    r = _run_checks("--device", "cuda", timeout=120)
    assert r.returncode == 0 and "SKIP" in r.stderr, r.stderr
    r = _run_checks("--device", "cuda", "--require-device", timeout=120)
    assert r.returncode == 1 and "SKIP" in r.stderr, r.stderr


def test_device_check_harness_on_cpu() -> None:
    """Every check of the device check, run on CPU tensors, passes."""
    r = _run_checks(
        "--device", "cpu", "--size-mib", "1", "--bandwidth-mib", "4", "--reps", "2", timeout=900
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ALL PASSED" in r.stdout
    for name in ("info", "te", "store", "pg", "ddp", "ep", "bandwidth"):
        assert f"[{name}] PASS" in r.stdout, r.stdout
    assert "TE WRITE host -> remote host (tcp)" in r.stdout
