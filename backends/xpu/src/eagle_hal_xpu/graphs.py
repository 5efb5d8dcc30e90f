"""XPU graphs through ``torch.xpu.XPUGraph``, present in torch 2.11 and later.

``xpu_graphs_available`` tells whether the installed torch has the API; the backend offers
capture only then and runs eagerly otherwise. Replay takes no host-side updates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from eagle_hal.hal.graphs import DeviceGraph, GraphCapture

__all__ = ["XpuGraph", "XpuGraphCapture", "xpu_graphs_available"]

_API = ("XPUGraph", "graph", "graph_pool_handle")


def xpu_graphs_available(device_module: ModuleType | None) -> bool:
    """Whether ``device_module`` (``torch.xpu``) has the graph API this capture uses."""
    return device_module is not None and all(hasattr(device_module, name) for name in _API)


class XpuGraph(DeviceGraph):
    """One ``XPUGraph``."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def replay(self, host_updates: dict[str, Any] | None = None) -> None:
        """Replay; ``host_updates`` must be empty (captured kernels read device buffers)."""
        if host_updates:
            raise ValueError(f"XPU graphs take no host-side updates, got {sorted(host_updates)}")
        self.graph.replay()


class XpuGraphCapture(GraphCapture):
    """Graphs of ``device_module`` (``torch.xpu``) sharing one memory pool. Raises
    ``RuntimeError`` when the installed torch has no XPU graph API."""

    def __init__(self, device_module: ModuleType) -> None:
        if not xpu_graphs_available(device_module):
            version = getattr(device_module, "__name__", "torch.xpu")
            raise RuntimeError(f"{version} has no XPUGraph (torch >= 2.11 has); run eagerly")
        self.device_module = device_module
        self.pool = device_module.graph_pool_handle()
        self._side_stream: Any = None

    def new_graph(self) -> XpuGraph:
        return XpuGraph(self.device_module.XPUGraph())

    def capture(self, graph: DeviceGraph) -> contextlib.AbstractContextManager[Any]:
        if not isinstance(graph, XpuGraph):
            raise TypeError(f"expected an XpuGraph from new_graph(), got {type(graph).__name__}")
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
