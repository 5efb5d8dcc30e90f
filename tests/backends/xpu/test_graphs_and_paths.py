"""XpuGraphCapture against a recording stand-in of torch.xpu's graph API, and the XPU
backend's device-neutral paths on the CPU."""

from __future__ import annotations

import pytest
from eagle_hal.device import parse_device
from eagle_hal.testing.graphs import recording_graph_module
from eagle_hal_xpu.backend import XpuBackend
from eagle_hal_xpu.graphs import XpuGraphCapture, xpu_graphs_available
from eagle_hal_xpu.plugin import DESCRIPTOR


def recording_xpu(with_graphs: bool = True):
    return recording_graph_module("XPUGraph", with_graphs)


def test_graph_api_detection_and_capture():
    """XPUGraph present (torch >= 2.11): captures share a pool and replay; absent: refused."""
    module = recording_xpu()
    assert xpu_graphs_available(module) and not xpu_graphs_available(recording_xpu(False))
    capture = XpuGraphCapture(module)
    graph = capture.new_graph()
    with capture.warmup():
        pass
    with capture.capture(graph):
        pass
    graph.replay()
    assert module.log[-2:] == [("capture", graph.graph, "pool"), ("replay", graph.graph)]
    assert ("stream", "side") in module.log
    with pytest.raises(ValueError):
        graph.replay({"cpu_update_input": []})
    with pytest.raises(RuntimeError, match="XPUGraph"):
        XpuGraphCapture(recording_xpu(False))


def test_cpu_bound_backend_paths(monkeypatch):
    """Off the XPU: no graphs; Triton paths only under the interpreter."""
    backend = XpuBackend(DESCRIPTOR, parse_device("cpu"))
    assert backend.graph_capture() is None and not backend.capabilities.graph_capture
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert type(backend.sampling_ops()).__name__ == "ReferenceSamplingOps"
    assert backend.model_kernels().name == "reference"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert type(backend.sampling_ops()).__name__ == "TritonSamplingOps"
    assert backend.model_kernels().name == "triton"
