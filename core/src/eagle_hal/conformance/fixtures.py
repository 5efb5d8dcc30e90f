"""The fixtures conformance checks use; registered by the plugin only when it is enabled."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eagle_hal.backend import Backend
from eagle_hal.conformance.session import current_session

__all__ = ["backend", "conformance", "device", "ops", "reference_ops", "tolerance"]


@pytest.fixture(scope="session")
def conformance(request: Any) -> Any:
    """The ``ConformanceSession`` of this run."""
    return current_session(request.config)


@pytest.fixture(scope="session")
def backend(conformance: Any) -> Backend:
    """The backend under test (its selection error fails every check that uses it)."""
    return conformance.backend


@pytest.fixture(scope="session")
def device(backend: Backend) -> Any:
    """The torch device the backend places tensors on."""
    return backend.torch_device


@pytest.fixture(scope="session")
def ops(backend: Backend) -> Any:
    """The backend's ``SamplingOps``."""
    return backend.sampling_ops()


@pytest.fixture(scope="session")
def reference_ops() -> Any:
    """The pure-torch reference ``SamplingOps`` (run on the host)."""
    from eagle_hal.ops.reference import ReferenceSamplingOps

    return ReferenceSamplingOps()


@pytest.fixture(scope="session")
def tolerance(backend: Backend) -> Callable[[str], tuple[float, float]]:
    """``tolerance(dtype_name) -> (atol, rtol)`` as the backend declares them."""
    return backend.tolerances().for_dtype
