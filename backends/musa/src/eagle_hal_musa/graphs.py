"""MUSA graphs through ``torch.musa.MUSAGraph`` (torch_musa mirrors the CUDA-graph API).

Replay takes no host-side updates: captured kernels read device buffers.
"""

from __future__ import annotations

from eagle_hal.plugin_api import ModuleGraph, ModuleGraphCapture

__all__ = ["MusaGraph", "MusaGraphCapture"]


class MusaGraph(ModuleGraph):
    """One ``MUSAGraph``."""

    label = "MUSA"


class MusaGraphCapture(ModuleGraphCapture):
    """Graphs of ``torch.musa`` sharing one memory pool."""

    graph_class = "MUSAGraph"
    graph_type = MusaGraph
