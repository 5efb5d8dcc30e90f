"""What a check needs from a backend, and whether the backend has it.

A check states its needs with ``requires(...)`` (a mark; usable per parameter through
``pytest.param(..., marks=requires(...))``). A need is one of:

* ``"graph_capture"``: ``Capabilities.graph_capture`` and a non-None ``graph_capture()``;
* ``"triton"``: ``Capabilities.triton``;
* ``"dtype:<name>"``: the dtype is in ``Capabilities.dtypes``;
* ``"tree_mask:<mode>"``: the layout is in ``Capabilities.tree_mask_modes``;
* ``"page_size:<n>"``: ``Capabilities.supports_page_size(n)``;
* ``"sliding_window"``, ``"logit_softcap"``: the ``Capabilities`` field of that name.

A need the backend lacks skips the check with the reason ``unmet`` gives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from eagle_hal.backend import Backend

__all__ = ["MARK_NAME", "requires", "unmet"]

MARK_NAME = "eagle_hal_requires"


def requires(*needs: str) -> Any:
    """The mark declaring ``needs`` (see the module docstring); raises ``ValueError`` on a
    malformed need so that a typo fails at import, not as a silent skip."""
    for need in needs:
        kind, _, value = need.partition(":")
        if kind in ("graph_capture", "triton", "sliding_window", "logit_softcap") and not value:
            continue
        if kind in ("dtype", "tree_mask") and value:
            continue
        if kind == "page_size" and value.isdigit():
            continue
        raise ValueError(
            f"unknown conformance need {need!r}; see eagle_hal.conformance.requirements"
        )
    return getattr(pytest.mark, MARK_NAME)(*needs)


def unmet(need: str, backend: Backend) -> str | None:
    """Why ``backend`` does not meet ``need``, or ``None`` when it does."""
    caps = backend.capabilities
    kind, _, value = need.partition(":")
    name = backend.name
    if kind == "graph_capture":
        if not caps.graph_capture:
            return f"backend {name!r} declares no graph capture (Capabilities.graph_capture)"
        if backend.graph_capture() is None:
            return f"backend {name!r}: graph_capture() returned None on this device"
        return None
    if kind == "triton":
        return None if caps.triton else f"backend {name!r} declares no Triton support"
    if kind in ("sliding_window", "logit_softcap"):
        if getattr(caps, kind):
            return None
        return f"backend {name!r} does not declare Capabilities.{kind}"
    if kind == "dtype":
        return None if value in caps.dtypes else f"backend {name!r} does not list dtype {value}"
    if kind == "tree_mask":
        if value in caps.tree_mask_modes:
            return None
        return f"backend {name!r} does not accept tree-mask layout {value!r}"
    if kind == "page_size":
        if caps.supports_page_size(int(value)):
            return None
        return f"backend {name!r} does not support page size {value}"
    raise ValueError(f"unknown conformance need {need!r}")

