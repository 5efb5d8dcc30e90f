"""HIP graphs through PyTorch's CUDA-graph API (``torch.cuda.CUDAGraph`` is HIP on ROCm).

The replay takes no host-side updates: captured kernels read lengths and slots from device
buffers the graph runner refreshes in place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from eagle_hal.hal.graphs import DeviceGraph, GraphCapture

__all__ = ["HipGraph", "HipGraphCapture"]


class HipGraph(DeviceGraph):
    """One ``CUDAGraph`` (a HIP graph on ROCm builds)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def replay(self, host_updates: dict[str, Any] | None = None) -> None:
        """Replay; ``host_updates`` must be empty (HIP graphs read device buffers only)."""
        if host_updates:
            raise ValueError(
                f"HIP graphs take no host-side updates, got {sorted(host_updates)}; refresh "
                f"the static device buffers instead"
            )
        self.graph.replay()


class HipGraphCapture(GraphCapture):
    """Graphs of ``device_module`` (``torch.cuda``) sharing one memory pool."""

    def __init__(self, device_module: ModuleType) -> None:
        self.device_module = device_module
        self.pool = device_module.graph_pool_handle()
        self._side_stream: Any = None

    def new_graph(self) -> HipGraph:
        return HipGraph(self.device_module.CUDAGraph())

    def capture(self, graph: DeviceGraph) -> contextlib.AbstractContextManager[Any]:
        if not isinstance(graph, HipGraph):
            raise TypeError(f"expected a HipGraph from new_graph(), got {type(graph).__name__}")
        return self.device_module.graph(graph.graph, pool=self.pool)

    @contextlib.contextmanager
    def warmup(self) -> Iterator[None]:
        """Warm up on a side stream, as capture does, so lazy initialisation is not captured."""
        if self._side_stream is None:
            self._side_stream = self.device_module.Stream()
        self._side_stream.wait_stream(self.device_module.current_stream())
        with self.device_module.stream(self._side_stream):
            yield
        self.device_module.current_stream().wait_stream(self._side_stream)
