"""Whether the ROCm backend uses aiter's paged decode attention, and why (not).

aiter is opt-in: ``EAGLE_HAL_ROCM_AITER=1``. With it set, aiter is used when all of these
hold, and the backend says which one failed otherwise:

* ``import aiter`` succeeds and the module has ``paged_attention_v1``;
* bound to a GPU, its architecture is one ``paged_attention_v1`` is built for: the kernel
  body is compiled only under ``__gfx90a__`` / ``__gfx942__`` / ``__gfx950__`` (ROCm/aiter,
  ``csrc/cpp_itfs/pa/pa_v1.cuh``); elsewhere it is ``UNREACHABLE_CODE``. Bound to the CPU
  (tests, with an emulation installed as ``aiter``), no architecture is checked.

Why opt-in rather than automatic: the adapter has been checked only against an emulation
written from aiter's sources, never on AMD hardware. The per-model conditions (page size,
head size, dtype) are checked where the attention backend is made
(``attention_aiter.decode_geometry_problem``).

This module imports aiter only inside ``resolve_aiter``; ``probe_note`` does not import it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from eagle_hal.plugin_api import OptInLibrary

__all__ = [
    "AITER_ENV", "PAGED_DECODE_ARCHS", "AiterChoice", "aiter_requested", "probe_note",
    "resolve_aiter",
]

AITER_ENV = "EAGLE_HAL_ROCM_AITER"
PAGED_DECODE_ARCHS = ("gfx90a", "gfx942", "gfx950")  # pa_v1.cuh's __HIP__GFX9__ guard


class AiterChoice(NamedTuple):
    """``paged_attention_v1`` when aiter is to be used (else ``None``), aiter's version, and
    a sentence saying what is used and why."""

    paged_attention_v1: Callable[..., Any] | None
    version: str | None
    reason: str


_AITER = OptInLibrary("aiter", AITER_ENV, "aiter paged decode", "decode on the shared path")


def aiter_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``EAGLE_HAL_ROCM_AITER`` opts in (is 1); ``environ``: default ``os.environ``."""
    return _AITER.requested(environ)[0]


def resolve_aiter(
    gcn_arch_name: str | None, environ: Mapping[str, str] | None = None
) -> AiterChoice:
    """Decide whether to use aiter's ``paged_attention_v1`` for decode; never raises.

    ``gcn_arch_name`` is the bound GPU's ``gcnArchName`` (``"gfx942:sramecc+:xnack-"``), or
    ``None`` off the GPU (no architecture check).
    """
    requested, problem = _AITER.requested(environ)
    if problem:
        return AiterChoice(None, None, problem)
    if not requested:
        return AiterChoice(None, None, f"aiter not used (opt in with {AITER_ENV}=1)")
    try:
        aiter = importlib.import_module("aiter")
    except Exception as exc:  # ImportError, or whatever a broken install raises
        return AiterChoice(
            None, None,
            f"{AITER_ENV}=1 but aiter failed to import ({type(exc).__name__}: {exc}); "
            "decode stays on the shared path",
        )
    version = str(getattr(aiter, "__version__", "unknown"))
    op = getattr(aiter, "paged_attention_v1", None)
    if op is None:
        return AiterChoice(
            None, version,
            f"{AITER_ENV}=1 but aiter {version} has no paged_attention_v1; decode stays on "
            "the shared path",
        )
    if gcn_arch_name is not None:
        arch = gcn_arch_name.split(":", 1)[0].strip().lower()
        if arch not in PAGED_DECODE_ARCHS:
            return AiterChoice(
                None, version,
                f"{AITER_ENV}=1 but aiter's paged_attention_v1 is built only for "
                f"{', '.join(PAGED_DECODE_ARCHS)}, not {arch}; decode stays on the shared "
                "path",
            )
    return AiterChoice(
        op, version,
        f"decode attention: aiter {version} paged_attention_v1 (kv_cache_layout NHD, read in "
        "place from the KV store) for bfloat16/float16, page size 16 or 32, head size "
        "64/128/256; every other mode and geometry: the shared Triton kernel",
    )


def probe_note(environ: Mapping[str, str] | None = None) -> str:
    """One clause for the probe's report, without importing aiter."""
    return _AITER.probe_note(environ)
