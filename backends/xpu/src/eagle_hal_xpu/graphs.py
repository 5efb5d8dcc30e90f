"""XPU graphs through ``torch.xpu.XPUGraph``, present in torch 2.11 and later.

``xpu_graphs_available`` tells whether the installed torch has the API; the backend offers
capture only then and runs eagerly otherwise. Replay takes no host-side updates.
"""

from __future__ import annotations

from types import ModuleType

from eagle_hal.plugin_api import ModuleGraph, ModuleGraphCapture

__all__ = ["XpuGraph", "XpuGraphCapture", "xpu_graphs_available"]

_API = ("XPUGraph", "graph", "graph_pool_handle")


def xpu_graphs_available(device_module: ModuleType | None) -> bool:
    """Whether ``device_module`` (``torch.xpu``) has the graph API this capture uses."""
    return device_module is not None and all(hasattr(device_module, name) for name in _API)


class XpuGraph(ModuleGraph):
    """One ``XPUGraph``."""

    label = "XPU"


class XpuGraphCapture(ModuleGraphCapture):
    """Graphs of ``device_module`` (``torch.xpu``) sharing one memory pool. Raises
    ``RuntimeError`` when the installed torch has no XPU graph API."""

    graph_class = "XPUGraph"
    graph_type = XpuGraph

    def __init__(self, device_module: ModuleType) -> None:
        if not xpu_graphs_available(device_module):
            version = getattr(device_module, "__name__", "torch.xpu")
            raise RuntimeError(f"{version} has no XPUGraph (torch >= 2.11 has); run eagerly")
        super().__init__(device_module)
