"""NPU graphs: NpuGraphCapture against the emulated ``torch.npu`` graph API (records,
captures nothing), and the attention backend's graph hooks through the conformance graphs
area on ``HostUpdatedGraphCapture`` (the core's strict graph emulation plus
``NPUGraph.update``'s host lengths) over the operator emulations."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from eagle_hal.backend import Capabilities
from eagle_hal.conformance import run_suite
from eagle_hal.device import parse_device
from eagle_hal.hal.attention import AttentionBackend, AttentionConfig
from eagle_hal.hal.graphs import GraphCapture
from eagle_hal_npu import glue
from eagle_hal_npu.attention import NpuAttentionBackend
from eagle_hal_npu.backend import NpuBackend
from eagle_hal_npu.graphs import HOST_UPDATE_KEY, NpuGraphCapture
from eagle_hal_npu.ops import NpuOps
from eagle_hal_npu.plugin import CAPABILITIES, DESCRIPTOR


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


def test_graphs_claimed_on_the_npu_only(emulation):
    """The NPU capabilities claim graph capture; a CPU-bound NpuBackend offers none."""
    assert DESCRIPTOR.capabilities.graph_capture
    backend = NpuBackend(DESCRIPTOR, parse_device("cpu"), ops=emulation.emulated_ops())
    assert backend.graph_capture() is None and not backend.capabilities.graph_capture
    layout = backend.kv_layout()
    assert (layout.page_size, layout.slot_dtype, layout.order) == (128, "int32", "NHD")


class _StaleLengthsAttention(NpuAttentionBackend):
    """Omits the host update: every replay keeps the capture's sequence lengths."""

    def replay_host_updates(self, batch, metadata):
        return None


class _EmulatedGraphsBackend(NpuBackend):
    """A CPU-bound NpuBackend with the NPU's capabilities and host-updated emulated graphs."""

    def __init__(self, emulation, attention_class: type[NpuAttentionBackend]) -> None:
        self.fused = emulation.FusedAttentionEmulation(allow_float32=True)
        ops = NpuOps(self.fused, emulation.emulated_reshape_and_cache)
        super().__init__(DESCRIPTOR, parse_device("cpu"), ops=ops)
        self.emulation, self.attention_class = emulation, attention_class

    @property
    def capabilities(self) -> Capabilities:
        # the NPU's, but bound to the host: nothing runs asynchronously, nothing is pinned
        return dataclasses.replace(CAPABILITIES, asynchronous=False)

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        return self.attention_class(config, self.ops())

    def graph_capture(self) -> GraphCapture:
        return self.emulation.HostUpdatedGraphCapture(self.fused)


def test_graphs_area_passes_with_host_updates(emulation):
    """Replay, bucket/padding, chain-loop and decoding checks of the graphs area pass (the
    chain loop's two draft steps in one graph take one merged host update)."""
    backend = _EmulatedGraphsBackend(emulation, NpuAttentionBackend)
    report = run_suite("cpu", backend=backend, areas=("graphs",))
    outcomes = {r.check_id.split("/")[-1]: r.outcome.value for r in report.results}
    # the NPU attention reads draft_kv_slots in its hooks: trees draft level by level
    assert outcomes.pop("tree_loop_equals_eager") == "skip"
    # nor may its fused attention's host lengths change per request in a prefill graph
    assert outcomes.pop("ragged_prefills_equal_plain") == "skip"
    assert outcomes and set(outcomes.values()) == {"pass"}, outcomes
    for check in ("replay_equals_eager", "bucketed_forwards_equal_eager",
                  "chain_loop_equals_eager", "graph_decoding_equals_plain"):
        assert any(name.startswith(check) for name in outcomes), check


def test_graphs_check_fails_without_host_updates(emulation):
    """Stale host lengths (no update on replay) fail every check of the graphs area."""
    backend = _EmulatedGraphsBackend(emulation, _StaleLengthsAttention)
    report = run_suite("cpu", backend=backend, areas=("graphs",))
    outcomes = {r.check_id: r.outcome.value for r in report.results}
    assert outcomes.pop("graphs/tree_loop_equals_eager") == "skip"  # see above
    assert outcomes.pop("graphs/ragged_prefills_equal_plain") == "skip"
    assert len(outcomes) == 10 and set(outcomes.values()) == {"fail"}, outcomes
    replay = report.results[0].message
    assert "output vs eager" in replay, replay  # a wrong result, not an error


def test_host_updates_must_match_the_captured_calls(emulation):
    """The emulated NPUGraph rejects a cpu_update_input of the wrong length or keys."""
    fused = emulation.FusedAttentionEmulation(allow_float32=True)
    capture = emulation.HostUpdatedGraphCapture(fused)
    query = torch.randn(1, 1, 2, 4)
    keys = torch.randn(1, 3, 2, 4)

    def body():
        out, _ = fused(query, keys, keys, input_layout="BSND", num_heads=2,
                       actual_seq_lengths_kv=[3])
        return out

    graph = capture.new_graph()
    out = capture.record(graph, body)
    assert graph.captured_calls == 1
    graph.replay({HOST_UPDATE_KEY: [{"actual_seq_lengths_kv": [1]}]})
    expected, _ = fused(query, keys[:, :1], keys[:, :1], input_layout="BSND", num_heads=2)
    torch.testing.assert_close(out, expected)  # the update reached the captured call
    with pytest.raises(ValueError, match="entries for 1 captured"):
        graph.replay({HOST_UPDATE_KEY: []})
    with pytest.raises(ValueError, match="cannot update"):
        graph.replay({HOST_UPDATE_KEY: [{"block_table": [1]}]})
