"""CUDA-graph capture for the core's graph runner.

``CudaGraphCapture`` uses ``torch.accelerator.Graph`` when the installed torch has it, else
``torch.cuda.CUDAGraph``. Every graph shares one memory pool (the first graph's), and
capture and warm-up run on one side stream, as CUDA requires (the legacy default stream
cannot be captured).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from eagle_hal.plugin_api import DeviceGraph, GraphCapture, no_collection

__all__ = ["CudaGraph", "CudaGraphCapture"]


class CudaGraph(DeviceGraph):
    """One captured CUDA graph (either torch API)."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def replay(self, host_updates: dict[str, Any] | None = None) -> None:
        """Replay on the current stream; CUDA graphs read every input from device buffers,
        so ``host_updates`` is ignored."""
        self.graph.replay()


class CudaGraphCapture(GraphCapture):
    """Graphs on ``device`` with one shared memory pool and one capture stream."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.uses_accelerator_graph = hasattr(torch.accelerator, "Graph")
        self._stream = torch.cuda.Stream(device)
        self._pool: Any = None

    def new_graph(self) -> CudaGraph:
        if self.uses_accelerator_graph:
            return CudaGraph(torch.accelerator.Graph(pool=self._pool))
        return CudaGraph(torch.cuda.CUDAGraph())

    @contextlib.contextmanager
    def capture(self, graph: DeviceGraph) -> Iterator[None]:
        """Record the work queued inside into ``graph`` (a ``CudaGraph`` from
        ``new_graph``); the first captured graph's pool is shared by all later ones."""
        if not isinstance(graph, CudaGraph):
            raise TypeError(f"expected a graph from new_graph(), got {type(graph).__name__}")
        torch.cuda.synchronize(self.device)
        with no_collection():  # no garbage holding device objects freed mid-capture
            yield from self._capture(graph)
        if self._pool is None:
            self._pool = graph.graph.pool()
        torch.cuda.synchronize(self.device)

    def _capture(self, graph: CudaGraph) -> Iterator[None]:
        if self.uses_accelerator_graph:
            with torch.cuda.stream(self._stream):
                graph.graph.capture_begin()
                try:
                    yield
                finally:
                    graph.graph.capture_end()
        else:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            with torch.cuda.graph(graph.graph, pool=self._pool, stream=self._stream):
                yield

    @contextlib.contextmanager
    def warmup(self) -> Iterator[None]:
        """Run the eager warm-up on the capture stream (lazy initialisations, autotuning and
        allocator state then match the capture)."""
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            yield
        current.wait_stream(self._stream)
        torch.cuda.synchronize(self.device)
