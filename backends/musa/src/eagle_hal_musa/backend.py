"""The MUSA backend implementation, imported only when the backend is selected."""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING

from eagle_hal.backend import Backend, BackendDescriptor, Capabilities
from eagle_hal.device import DeviceSpec

from eagle_hal_musa.plugin import CAPABILITIES, DEVICE_TYPE, EXTENSION

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from eagle_hal.hal.attention import AttentionBackend, AttentionConfig
    from eagle_hal.hal.graphs import GraphCapture

__all__ = ["MusaBackend"]


class MusaBackend(Backend):
    """Moore Threads GPUs through torch_musa (device ``musa``, a PrivateUse1 backend):
    attention through torch's SDPA (the pure-torch reference backend), reference sampling
    ops, ``MUSAGraph`` capture. Bound to another device (the CPU, in tests) it neither
    imports torch_musa nor offers graphs.
    """

    def __init__(self, descriptor: BackendDescriptor, device: DeviceSpec) -> None:
        super().__init__(descriptor, device)
        self._on_musa = device.torch_device_string.split(":")[0] == DEVICE_TYPE
        if self._on_musa:
            # torch knows the "musa" device type only once the extension is imported (torch's
            # autoload usually did it already; with TORCH_DEVICE_BACKEND_AUTOLOAD=0 it did not).
            importlib.import_module(EXTENSION)

    @property
    def capabilities(self) -> Capabilities:
        if self._on_musa:
            return CAPABILITIES
        return dataclasses.replace(CAPABILITIES, graph_capture=False)

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """``TorchAttentionBackend``: gathers the slots and calls torch's SDPA, which
        torch_musa implements (mate's flash attention is not wired in)."""
        from eagle_hal.ops.attention_reference import TorchAttentionBackend

        return TorchAttentionBackend(config)

    def graph_capture(self) -> GraphCapture | None:
        """``MUSAGraph`` capture; ``None`` off the MUSA device."""
        if not self._on_musa:
            return None
        import torch

        from eagle_hal_musa.graphs import MusaGraphCapture

        return MusaGraphCapture(torch.get_device_module(DEVICE_TYPE))
