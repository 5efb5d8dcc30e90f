"""Area 1, discovery: the probe never raises, and what the backend declares is coherent
with the device it was bound to."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from eagle_hal.backend import (
    API_VERSION,
    Availability,
    Backend,
    Capabilities,
    Tolerances,
    TreeMaskMode,
)
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal.hal.sampling import SamplingOps

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def test_probe_never_raises(backend: Backend) -> None:
    """Three probes return an available Availability with a reason, without raising."""
    results = []
    for _ in range(3):
        try:
            results.append(backend.descriptor.probe())
        except Exception as exc:  # the contract: a probe explains, it never raises
            pytest.fail(f"probe() of backend {backend.name!r} raised {type(exc).__name__}: {exc}")
    assert all(isinstance(r, Availability) for r in results), f"probe() returned {results!r}"
    assert all(r.ok for r in results), f"probe() says unavailable: {results[-1].reason}"


def test_api_version_compatible(backend: Backend) -> None:
    """The plugin's HAL API version is one this core accepts (same major, minor <= core)."""
    major, minor = backend.descriptor.api_version
    assert major == API_VERSION[0] and minor <= API_VERSION[1], (
        f"backend API {major}.{minor} vs core {API_VERSION[0]}.{API_VERSION[1]}"
    )


def test_serves_the_device(backend: Backend) -> None:
    """The backend serves the device kind it was bound to, and its torch device is usable."""
    spec = backend.device_spec
    assert spec.kind in backend.descriptor.device_types, (
        f"bound to '{spec}' but serves {backend.descriptor.device_types}"
    )
    device = backend.torch_device
    assert isinstance(device, torch.device), f"torch_device is {device!r}, not a torch.device"
    if spec.torch_type is not None:
        assert device.type == spec.torch_type, f"torch_device {device} for device '{spec}'"
    probe = torch.arange(5, device=device)
    assert probe.sum().item() == 10, "a tensor on the backend's device computes wrongly"


def test_capabilities_coherent(backend: Backend) -> None:
    """Capabilities: well-formed, dtypes creatable, a page size usable, graph flag honest."""
    caps = backend.capabilities
    assert isinstance(caps, Capabilities), f"capabilities is {type(caps).__name__}"
    assert caps.dtypes, "capabilities list no dtype"
    for name in caps.dtypes:
        assert name in _DTYPES, f"unknown dtype {name!r} in capabilities (known: {sorted(_DTYPES)})"
        tensor = torch.ones(4, dtype=_DTYPES[name], device=backend.torch_device)
        assert (tensor * 2).sum().item() == 8, (
            f"dtype {name} computes wrongly on {backend.torch_device}"
        )
    assert set(caps.tree_mask_modes) <= set(TreeMaskMode.ALL)
    smallest = caps.page_sizes[0] if caps.page_sizes else caps.page_size_multiple
    assert caps.supports_page_size(smallest), "no declared page size is supported"
    has_graphs = backend.graph_capture() is not None
    assert caps.graph_capture == has_graphs, (
        f"Capabilities.graph_capture={caps.graph_capture} but graph_capture() returned "
        f"{'an object' if has_graphs else 'None'}"
    )
    if caps.triton:
        assert importlib.util.find_spec("triton") is not None, (
            "declares Triton, triton not importable"
        )


def test_runtime_pieces(backend: Backend) -> None:
    """sampling_ops, kv_layout, tolerances and known_failures have the contract's types."""
    assert isinstance(backend.sampling_ops(), SamplingOps)
    layout = backend.kv_layout()
    assert isinstance(layout, KVLayout)
    tolerances = backend.tolerances()
    assert isinstance(tolerances, Tolerances)
    for name in backend.capabilities.dtypes:
        atol, rtol = tolerances.for_dtype(name)
        assert 0 <= atol < 1 and 0 <= rtol < 1, f"tolerances for {name} are {atol}, {rtol}"
    known = backend.known_failures()
    assert all(isinstance(k, str) and isinstance(v, str) and v for k, v in known.items()), (
        "known_failures() must map check-id patterns to non-empty reasons"
    )
