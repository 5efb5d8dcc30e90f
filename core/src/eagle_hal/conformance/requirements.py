"""What a check needs from a backend, and whether the backend has it.

A check states its needs with ``requires(...)`` (a mark; usable per parameter through
``pytest.param(..., marks=requires(...))``). A need is one of:

* ``"graph_capture"``: ``Capabilities.graph_capture`` and a non-None ``graph_capture()``;
* ``"triton"``: ``Capabilities.triton``;
* ``"dtype:<name>"``: the dtype is in ``Capabilities.dtypes``;
* ``"tree_mask:<mode>"``: the layout is in ``Capabilities.tree_mask_modes``;
* ``"page_size:<n>"``: ``Capabilities.supports_page_size(n)``.

A need the backend lacks skips the check with the reason ``unmet`` gives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from eagle_hal.backend import Backend

__all__ = ["MARK_NAME", "page_size_params", "requires", "unmet"]

MARK_NAME = "eagle_hal_requires"


def requires(*needs: str) -> Any:
    """The mark declaring ``needs`` (see the module docstring); raises ``ValueError`` on a
    malformed need so that a typo fails at import, not as a silent skip."""
    for need in needs:
        kind, _, value = need.partition(":")
        if kind in ("graph_capture", "triton") and not value:
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


def page_size_params(config: Any) -> list[Any]:
    """One ``pytest.param`` (id ``page<n>``, marked ``requires("page_size:<n>")``) per page
    size ``paged.page_sizes_to_check`` lists for the backend under test; the standard sizes
    alone when no backend could be selected (the checks then fail on the selection)."""
    from eagle_hal.conformance.paged import page_sizes_to_check
    from eagle_hal.conformance.plugin import SESSION_PLUGIN_NAME

    session = config.pluginmanager.get_plugin(SESSION_PLUGIN_NAME)
    backend = None
    if session is not None and session.selection_error is None:
        backend = session.backend
    return [pytest.param(p, marks=requires(f"page_size:{p}"), id=f"page{p}")
            for p in page_sizes_to_check(backend)]
