"""NpuGraphCapture against the emulated ``torch.npu`` graph API (records, captures nothing)."""

from __future__ import annotations

import pytest
from eagle_hal.device import parse_device
from eagle_hal_npu import glue
from eagle_hal_npu.backend import NpuBackend
from eagle_hal_npu.graphs import HOST_UPDATE_KEY, NpuGraphCapture
from eagle_hal_npu.plugin import DESCRIPTOR


def test_capture_uses_auto_dispatch_and_one_pool(emulation):
    """Every capture records with auto_dispatch_capture=True into the shared pool."""
    module = emulation.EmulatedNpuGraphModule()
    capture = NpuGraphCapture(module)
    graphs = [capture.new_graph() for _ in range(2)]
    for graph in graphs:
        with capture.warmup():
            pass
        with capture.capture(graph):
            pass
    captures = [entry for entry in module.log if entry[0] == "capture"]
    assert [entry[1] for entry in captures] == [g.graph for g in graphs]
    assert all(entry[2] == ("pool",) and entry[3] is True for entry in captures)
    streams = [entry[1] for entry in module.log if entry[0] == "stream"]
    assert streams == [("side stream",)] * 2  # one side stream, reused


def test_replay_pushes_host_lengths_before_replaying(emulation):
    """replay(host_updates) calls update(cpu_update_input=payload), then replay()."""
    module = emulation.EmulatedNpuGraphModule()
    capture = NpuGraphCapture(module)
    graph = capture.new_graph()
    payload = glue.graph_update_payload([17, 3], num_attention_calls=2, padded_batch_size=3)
    graph.replay({HOST_UPDATE_KEY: payload})
    graph.replay()
    assert module.log == [("update", payload), ("replay",), ("replay",)]
    with pytest.raises(KeyError, match="cpu_update_input"):
        graph.replay({"actual_seq_lengths_kv": [1]})


def test_no_graphs_off_the_npu(emulation):
    """A CPU-bound NpuBackend (tests) offers no capture and says so in its capabilities."""
    backend = NpuBackend(DESCRIPTOR, parse_device("cpu"), ops=emulation.emulated_ops())
    assert backend.graph_capture() is None and not backend.capabilities.graph_capture
    # not claimed anywhere until NpuAttentionBackend implements the replay hooks
    assert not DESCRIPTOR.capabilities.graph_capture
    layout = backend.kv_layout()
    assert (layout.page_size, layout.slot_dtype, layout.order) == (128, "int32", "NHD")
