"""MUSA graphs through ``torch.musa.MUSAGraph`` (torch_musa mirrors the CUDA-graph API).

Replay takes no host-side updates: captured kernels read device buffers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from eagle_hal.hal.graphs import DeviceGraph, GraphCapture

__all__ = ["MusaGraph", "MusaGraphCapture"]


class MusaGraph(DeviceGraph):
    """One ``MUSAGraph``."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def replay(self, host_updates: dict[str, Any] | None = None) -> None:
        """Replay; ``host_updates`` must be empty."""
        if host_updates:
            raise ValueError(f"MUSA graphs take no host-side updates, got {sorted(host_updates)}")
        self.graph.replay()


class MusaGraphCapture(GraphCapture):
    """Graphs of ``device_module`` (``torch.musa``) sharing one memory pool."""

    def __init__(self, device_module: ModuleType) -> None:
        self.device_module = device_module
        self.pool = device_module.graph_pool_handle()
        self._side_stream: Any = None

    def new_graph(self) -> MusaGraph:
        return MusaGraph(self.device_module.MUSAGraph())

    def capture(self, graph: DeviceGraph) -> contextlib.AbstractContextManager[Any]:
        if not isinstance(graph, MusaGraph):
            raise TypeError(f"expected a MusaGraph from new_graph(), got {type(graph).__name__}")
        return self.device_module.graph(graph.graph, pool=self.pool)

    @contextlib.contextmanager
    def warmup(self) -> Iterator[None]:
        """Warm up on a side stream, as capture does."""
        if self._side_stream is None:
            self._side_stream = self.device_module.Stream()
        self._side_stream.wait_stream(self.device_module.current_stream())
        with self.device_module.stream(self._side_stream):
            yield
        self.device_module.current_stream().wait_stream(self._side_stream)
