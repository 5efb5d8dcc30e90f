"""HipGraphCapture against a recording stand-in of torch.cuda's graph API."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
from eagle_hal_rocm.graphs import HipGraphCapture


class RecordingStream:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def wait_stream(self, other):
        self.log.append(("wait", self.name, other.name))


def recording_module():
    log = []
    current = RecordingStream(log, "current")

    class Graph:
        def replay(self):
            log.append(("replay", self))

    @contextlib.contextmanager
    def graph(g, pool=None):
        log.append(("capture", g, pool))
        yield

    @contextlib.contextmanager
    def stream(s):
        log.append(("stream", s.name))
        yield

    return SimpleNamespace(
        log=log, CUDAGraph=Graph, graph=graph, stream=stream, graph_pool_handle=lambda: "pool",
        Stream=lambda: RecordingStream(log, "side"), current_stream=lambda: current,
    )


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
