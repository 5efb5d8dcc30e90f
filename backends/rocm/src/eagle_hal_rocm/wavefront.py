"""Wavefront size of an AMD GPU and the Triton launch parameters derived from it.

AMD GPUs run 64-lane wavefronts on GCN and CDNA (``gfx9*``: MI100/MI200/MI300) and 32-lane
ones on RDNA (``gfx10*``, ``gfx11*``, ``gfx12*``). Triton's ``num_warps`` counts wavefronts
there, so a kernel tuned for 32-lane NVIDIA warps launches twice the threads on CDNA unless
``num_warps`` is derived from the wavefront size. These are pure functions of the device
properties torch reports (``warp_size``, ``gcnArchName``); nothing here touches a device.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from eagle_hal.plugin_api import settings

__all__ = [
    "WAVEFRONT_ENV",
    "TritonLaunchParams",
    "device_wavefront_size",
    "launch_params",
    "wavefront_size_for_arch",
]

WAVEFRONT_ENV = "EAGLE_HAL_ROCM_WAVEFRONT_SIZE"  # override: 32 or 64
_THREADS_PER_PROGRAM = 256  # what the shared kernels' num_warps=8 means on 32-lane warps


def wavefront_size_for_arch(gcn_arch_name: str) -> int:
    """64 for ``gfx9*`` (GCN/CDNA), 32 for ``gfx10*``-``gfx12*`` (RDNA).

    ``gcn_arch_name`` is torch's ``gcnArchName``, e.g. ``"gfx942:sramecc+:xnack-"``.
    Raises ``ValueError`` for a name that is not a known AMD architecture family.
    """
    base = gcn_arch_name.split(":", 1)[0].strip().lower()
    match = re.fullmatch(r"gfx(\d{1,2})([0-9a-f]{2})", base)
    if match is None:
        raise ValueError(f"{gcn_arch_name!r} is not an AMD GPU architecture name (gfxNNN)")
    family = int(match.group(1))
    if family in (8, 9):
        return 64
    if family in (10, 11, 12):
        return 32
    raise ValueError(
        f"unknown AMD GPU family gfx{family} in {gcn_arch_name!r}; set {WAVEFRONT_ENV}")


def device_wavefront_size(properties: Any, environ: Mapping[str, str] | None = None) -> int:
    """The wavefront size of a device, from ``torch.cuda.get_device_properties(i)``.

    Order: ``EAGLE_HAL_ROCM_WAVEFRONT_SIZE`` if set (in ``environ``, default
    ``os.environ``); the ``warp_size`` property if torch reports one; the family of
    ``gcnArchName``. Raises ``ValueError`` when none applies, ``InvalidSetting`` (a
    ``ValueError``) for a forced size other than 32 or 64.
    """
    forced = settings.get(WAVEFRONT_ENV, environ)
    if forced is not None:
        return forced
    warp_size = getattr(properties, "warp_size", None)
    if isinstance(warp_size, int) and warp_size in (32, 64):
        return warp_size
    arch = getattr(properties, "gcnArchName", None)
    if arch:
        return wavefront_size_for_arch(arch)
    raise ValueError(
        f"the device reports neither warp_size nor gcnArchName; set {WAVEFRONT_ENV}=64 or 32"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class TritonLaunchParams:
    """Launch parameters of the shared Triton sampling kernels (``TritonSamplingOps``)."""

    wavefront_size: int
    num_warps: int  # wavefronts per program
    vocab_block: int  # logits one program reads per step
    vocab_chunk: int  # logits one program of the split-vocabulary argmax covers

    def __post_init__(self) -> None:
        if self.wavefront_size not in (32, 64):
            raise ValueError(f"wavefront size must be 32 or 64, got {self.wavefront_size}")
        if self.vocab_block % (self.num_warps * self.wavefront_size):
            raise ValueError("vocab_block must cover whole wavefronts")

    @property
    def threads_per_program(self) -> int:
        return self.num_warps * self.wavefront_size

    def as_kwargs(self) -> dict[str, int]:
        return {"num_warps": self.num_warps, "vocab_block": self.vocab_block,
                "vocab_chunk": self.vocab_chunk}


def launch_params(wavefront_size: int) -> TritonLaunchParams:
    """256 threads per program whatever the wavefront: 4 wavefronts of 64 on CDNA, 8 of 32
    on RDNA (and on NVIDIA, where the same kernels run with 32-lane warps)."""
    if wavefront_size not in (32, 64):
        raise ValueError(f"wavefront size must be 32 or 64, got {wavefront_size}")
    return TritonLaunchParams(
        wavefront_size=wavefront_size,
        num_warps=_THREADS_PER_PROGRAM // wavefront_size,
        vocab_block=4096,
        vocab_chunk=16384,
    )
