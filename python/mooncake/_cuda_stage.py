"""Host staging of CUDA tensors for calls whose work runs on host memory.

A call that accepts CUDA tensors but computes on the CPU (EP dispatch and
combine) takes host copies of its CUDA inputs, runs on them, and copies its
results back to the GPU before it reports completion:

* ``host(t)`` copies with ``Tensor.to("cpu")`` on the caller's current
  stream and waits for it, so the copy sees everything queued before the
  call that produces ``t``.
* ``output(h)`` makes a CUDA tensor that receives the host result ``h``;
  ``into(d, h)`` copies ``h`` back into an existing CUDA tensor ``d``.
* ``finish()`` runs those copies (``copy_`` from pageable host memory,
  which returns only when the bytes are on the device) on the stream current
  at the time it is called: work queued afterwards on that stream sees the
  results.

Without CUDA tensors it does nothing, so the CPU path costs one check.
"""

from __future__ import annotations

from typing import Any

import torch


class CudaStage:
    """The host copies of one call's CUDA tensors and the copies back."""

    def __init__(self, *tensors: Any) -> None:
        devices = {t.device for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda}
        if len(devices) > 1:
            raise ValueError(f"tensors are on several GPUs: {sorted(map(str, devices))}")
        self.device: torch.device | None = devices.pop() if devices else None
        self._back: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def active(self) -> bool:
        """Whether the call has CUDA tensors."""
        return self.device is not None

    @staticmethod
    def host(t: torch.Tensor) -> torch.Tensor:
        """`t` when it is on the CPU; otherwise a contiguous host copy of it."""
        if t.device.type == "cpu":
            return t
        return t.to("cpu").contiguous()

    def output(self, h: torch.Tensor) -> torch.Tensor:
        """A CUDA tensor that gets host result `h` at `finish` (`h` when inactive)."""
        if self.device is None:
            return h
        d = torch.empty(h.shape, dtype=h.dtype, device=self.device)
        self._back.append((d, h))
        return d

    def into(self, d: torch.Tensor, h: torch.Tensor) -> None:
        """Copy host result `h` into CUDA tensor `d` at `finish`."""
        if d is not h:
            self._back.append((d, h))

    def finish(self) -> None:
        """Copy every host result to its CUDA tensor, returning when they are there."""
        back, self._back = self._back, []
        for d, h in back:
            d.copy_(h)
