"""The areas of the conformance suite, in the order they run and are reported.

Each area is one module ``checks/check_<area>.py``. This module imports nothing, so the
command line can list the areas without importing pytest or the suite.
"""

from __future__ import annotations

__all__ = ["AREAS"]

AREAS: tuple[str, ...] = (
    "discovery",
    "sampling",
    "model_kernels",
    "attention",
    "kv",
    "graphs",
    "end_to_end",
    "soak",
)
