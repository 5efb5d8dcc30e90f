"""MusaGraphCapture against a recording stand-in of torch.musa's graph API, and the MUSA
backend's device-neutral paths on the CPU."""

from __future__ import annotations

import pytest
from eagle_hal.device import parse_device
from eagle_hal.testing.graphs import recording_graph_module
from eagle_hal_musa.backend import MusaBackend
from eagle_hal_musa.graphs import MusaGraphCapture
from eagle_hal_musa.plugin import DESCRIPTOR


def recording_musa():
    return recording_graph_module("MUSAGraph")


def test_capture_and_replay():
    """MUSAGraph captures share one pool; warm-up on a fenced side stream; plain replay."""
    module = recording_musa()
    capture = MusaGraphCapture(module)
    graph = capture.new_graph()
    with capture.warmup():
        pass
    with capture.capture(graph):
        pass
    graph.replay()
    assert module.log == [
        ("wait", "side", "current"), ("stream", "side"), ("wait", "current", "side"),
        ("capture", graph.graph, "pool"), ("replay", graph.graph),
    ]
    with pytest.raises(ValueError):
        graph.replay({"x": 1})


def test_cpu_bound_backend_needs_no_extension():
    """Off the MUSA device: torch_musa is not imported, no graphs, SDPA reference attention."""
    backend = MusaBackend(DESCRIPTOR, parse_device("cpu"))
    assert backend.graph_capture() is None and not backend.capabilities.graph_capture
    assert DESCRIPTOR.capabilities.graph_capture
    assert type(backend.sampling_ops()).__name__ == "ReferenceSamplingOps"
