"""NPU graphs through ``torch.npu.NPUGraph``, with host-side updates on replay.

A captured fused-attention call keeps the host-side ``actual_seq_lengths_kv`` it was
captured with. ``torch.npu.graph(..., auto_dispatch_capture=True)`` records such calls so
that ``NPUGraph.update(cpu_update_input=[...])`` can refresh them before a replay; the core's
``DeviceGraph.replay(host_updates)`` carries that list under ``HOST_UPDATE_KEY``;
``NpuAttentionBackend.replay_host_updates`` builds it and the core's graph runner passes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from eagle_hal.plugin_api import DeviceGraph, GraphCapture

__all__ = ["HOST_UPDATE_KEY", "NpuGraph", "NpuGraphCapture"]

HOST_UPDATE_KEY = "cpu_update_input"  # host_updates[HOST_UPDATE_KEY]: list, one dict per op


class NpuGraph(DeviceGraph):
    """One ``NPUGraph``."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def replay(self, host_updates: dict[str, Any] | None = None) -> None:
        """Push ``host_updates[HOST_UPDATE_KEY]`` (if given) into the graph, then replay.
        Raises ``KeyError`` for host updates without that key: a silently stale length
        would attend over the wrong number of keys."""
        if host_updates:
            if HOST_UPDATE_KEY not in host_updates:
                raise KeyError(
                    f"NPU graph host updates go under {HOST_UPDATE_KEY!r}, got "
                    f"{sorted(host_updates)}"
                )
            self.graph.update(cpu_update_input=host_updates[HOST_UPDATE_KEY])
        self.graph.replay()


class NpuGraphCapture(GraphCapture):
    """Graphs of ``device_module`` (``torch.npu``) sharing one memory pool."""

    def __init__(self, device_module: ModuleType) -> None:
        self.device_module = device_module
        self.pool = device_module.graph_pool_handle()
        self._side_stream: Any = None

    def new_graph(self) -> NpuGraph:
        return NpuGraph(self.device_module.NPUGraph())

    def capture(self, graph: DeviceGraph) -> contextlib.AbstractContextManager[None]:
        """Record into ``graph`` with automatic dispatch capture, so host-side operator
        arguments stay updatable on replay."""
        if not isinstance(graph, NpuGraph):
            raise TypeError(f"expected an NpuGraph from new_graph(), got {type(graph).__name__}")
        return self.device_module.graph(graph.graph, pool=self.pool, auto_dispatch_capture=True)

    @contextlib.contextmanager
    def warmup(self) -> Iterator[None]:
        """Run the warm-up on a side stream, as capture will."""
        if self._side_stream is None:
            self._side_stream = self.device_module.Stream()
        with self.device_module.stream(self._side_stream):
            yield
