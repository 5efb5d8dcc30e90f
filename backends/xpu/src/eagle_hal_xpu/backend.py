"""The Intel XPU backend implementation, imported only when the backend is selected."""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import TYPE_CHECKING

from eagle_hal.plugin_api import Backend, BackendDescriptor, Capabilities, DeviceSpec, settings

from eagle_hal_xpu.plugin import CAPABILITIES

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from eagle_hal.plugin_api import AttentionBackend, AttentionConfig, GraphCapture, SamplingOps

__all__ = ["XpuBackend"]

_DEVICE_TYPE = "xpu"


class XpuBackend(Backend):
    """Intel GPUs through native ``torch.xpu``: the shared Triton kernels (Intel's Triton
    backend compiles them), ``XPUGraph`` capture where the installed torch has it.

    Intel Extension for PyTorch is not used (retired after 2.8). Bound to the CPU (tests),
    the Triton paths run only under ``TRITON_INTERPRET=1``, the pure-torch ones otherwise.
    """

    def __init__(self, descriptor: BackendDescriptor, device: DeviceSpec) -> None:
        super().__init__(descriptor, device)
        self._on_xpu = device.torch_device_string.split(":")[0] == _DEVICE_TYPE

    @property
    def capabilities(self) -> Capabilities:
        if not self._uses_triton():
            return dataclasses.replace(
                CAPABILITIES, triton=False, fused_sampling_ops=(), asynchronous=self._on_xpu,
                notes="bound off the XPU without TRITON_INTERPRET=1: pure-torch paths",
            )
        return dataclasses.replace(CAPABILITIES, graph_capture=self._graphs_available(),
                                   asynchronous=self._on_xpu)

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def _uses_triton(self) -> bool:
        if importlib.util.find_spec("triton") is None:
            return False
        return self._on_xpu or settings.triton_interpreted()

    def _graphs_available(self) -> bool:
        if not self._on_xpu:
            return False
        import torch

        from eagle_hal_xpu.graphs import xpu_graphs_available

        return xpu_graphs_available(getattr(torch, _DEVICE_TYPE, None))

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """The shared ``TritonAttentionBackend``; the pure-torch reference without Triton."""
        if self._uses_triton():
            from eagle_hal.plugin_api import TritonAttentionBackend

            return TritonAttentionBackend(config)
        from eagle_hal.plugin_api import TorchAttentionBackend

        return TorchAttentionBackend(config)

    def sampling_ops(self) -> SamplingOps:
        """``TritonSamplingOps`` with its default launch parameters; the reference without
        Triton."""
        if self._uses_triton():
            from eagle_hal.plugin_api import TritonSamplingOps

            return TritonSamplingOps()
        return super().sampling_ops()

    def graph_capture(self) -> GraphCapture | None:
        """``XPUGraph`` capture when torch has it (2.11+); ``None`` (eager) otherwise."""
        if not self._graphs_available():
            return None
        import torch

        from eagle_hal_xpu.graphs import XpuGraphCapture

        return XpuGraphCapture(torch.get_device_module(_DEVICE_TYPE))
