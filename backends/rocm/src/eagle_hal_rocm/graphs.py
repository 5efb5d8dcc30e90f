"""HIP graphs through PyTorch's CUDA-graph API (``torch.cuda.CUDAGraph`` is HIP on ROCm).

The replay takes no host-side updates: captured kernels read lengths and slots from device
buffers the graph runner refreshes in place.
"""

from __future__ import annotations

from eagle_hal.plugin_api import ModuleGraph, ModuleGraphCapture

__all__ = ["HipGraph", "HipGraphCapture"]


class HipGraph(ModuleGraph):
    """One ``CUDAGraph`` (a HIP graph on ROCm builds)."""

    label = "HIP"


class HipGraphCapture(ModuleGraphCapture):
    """Graphs of ``torch.cuda`` (HIP on ROCm) sharing one memory pool."""

    graph_class = "CUDAGraph"
    graph_type = HipGraph
