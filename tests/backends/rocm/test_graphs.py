"""HipGraphCapture against a recording stand-in of torch.cuda's graph API."""

from __future__ import annotations

import pytest
from eagle_hal.testing.graphs import recording_graph_module
from eagle_hal_rocm.graphs import HipGraphCapture


def recording_module():
    return recording_graph_module("CUDAGraph")


def test_capture_warmup_and_replay():
    """Captures share one pool; warm-up runs on a side stream fenced both ways; replay
    refuses host updates (HIP graphs read device buffers only)."""
    module = recording_module()
    capture = HipGraphCapture(module)
    graph = capture.new_graph()
    with capture.warmup():
        module.log.append(("work",))
    with capture.capture(graph):
        pass
    graph.replay()
    assert module.log == [
        ("wait", "side", "current"), ("stream", "side"), ("work",), ("wait", "current", "side"),
        ("capture", graph.graph, "pool"), ("replay", graph.graph),
    ]
    with pytest.raises(ValueError, match="no host-side updates"):
        graph.replay({"cpu_update_input": []})
    with pytest.raises(TypeError):
        capture.capture(object())
