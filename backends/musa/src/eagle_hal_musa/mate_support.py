"""Whether the MUSA backend uses mate's paged flash attention, and why (not).

mate (MUSA AI Tensor Engine, github.com/MooreThreads/mate, import name ``mate``) is
opt-in: ``EAGLE_HAL_MUSA_MATE=1``. With it set, mate is used when all of these hold, and
the backend says which one failed otherwise:

* ``import mate`` succeeds and the module has ``flash_attn_with_kvcache`` (exported lazily
  from ``mate/mha_interface.py`` by ``mate/__init__.py``);
* bound to a MUSA GPU, it is the architecture mate requires: "Pinghu (MP31)" (mate's
  ``README.md``), compute capability 3.1 (``mate/testing/arch.py``: "MP31 is 31"). Bound to
  the CPU (tests, with an emulation installed as ``mate``), nothing is checked.

Opt-in rather than automatic because the adapter has been checked only against an
emulation written from mate's sources, never on Moore Threads hardware. The per-model
conditions (dtype, head size) are checked where the attention backend is made
(``attention_mate.causal_geometry_problem``).

This module imports mate only inside ``resolve_mate``; ``probe_note`` does not import it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from eagle_hal.plugin_api import OptInLibrary

__all__ = [
    "MATE_ENV", "MATE_COMPUTE_CAPABILITIES", "MateChoice", "mate_requested", "probe_note",
    "resolve_mate",
]

MATE_ENV = "EAGLE_HAL_MUSA_MATE"
MATE_COMPUTE_CAPABILITIES = ((3, 1),)  # MP31 (Pinghu), mate's README


class MateChoice(NamedTuple):
    """``flash_attn_with_kvcache`` when mate is to be used (else ``None``), mate's version,
    and a sentence saying what is used and why."""

    flash_attn_with_kvcache: Callable[..., Any] | None
    version: str | None
    reason: str


_MATE = OptInLibrary("mate", MATE_ENV, "mate flash attention", "attention on SDPA")


def mate_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``EAGLE_HAL_MUSA_MATE`` opts in (is 1); ``environ``: default ``os.environ``."""
    return _MATE.requested(environ)[0]


def resolve_mate(
    compute_capability: tuple[int, int] | None, environ: Mapping[str, str] | None = None
) -> MateChoice:
    """Decide whether to use mate's ``flash_attn_with_kvcache``; never raises.

    ``compute_capability`` is the bound GPU's ``(major, minor)``, or ``None`` off the GPU
    (no architecture check).
    """
    requested, problem = _MATE.requested(environ)
    if problem:
        return MateChoice(None, None, problem)
    if not requested:
        return MateChoice(None, None, f"mate not used (opt in with {MATE_ENV}=1)")
    try:
        mate = importlib.import_module("mate")
        version = str(getattr(mate, "__version__", "unknown"))
        op = getattr(mate, "flash_attn_with_kvcache", None)  # a lazy attribute: may import
    except Exception as exc:  # ImportError, or whatever a broken install raises
        return MateChoice(
            None, None,
            f"{MATE_ENV}=1 but mate failed to import ({type(exc).__name__}: {exc}); "
            "attention stays on SDPA",
        )
    if op is None:
        return MateChoice(
            None, version,
            f"{MATE_ENV}=1 but mate {version} has no flash_attn_with_kvcache; attention "
            "stays on SDPA",
        )
    capability = None if compute_capability is None else tuple(compute_capability)
    if capability is not None and capability not in MATE_COMPUTE_CAPABILITIES:
        major, minor = capability
        return MateChoice(
            None, version,
            f"{MATE_ENV}=1 but mate supports MP31 (compute capability 3.1), not "
            f"{major}.{minor}; attention stays on SDPA",
        )
    return MateChoice(
        op, version,
        f"attention: mate {version} flash_attn_with_kvcache (paged, causal, reading the KV "
        "store's pages in place) for EXTEND, DECODE and DRAFT_EXTEND in bfloat16/float16, "
        "head size <= 512, outside graph capture; TARGET_VERIFY, DRAFT_DECODE, captured "
        "forwards and other geometries: SDPA over gathered slots",
    )


def probe_note(environ: Mapping[str, str] | None = None) -> str:
    """One clause for the probe's report, without importing mate."""
    return _MATE.probe_note(environ)
