"""The MUSA backend implementation, imported only when the backend is selected."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from eagle_hal.backend import Backend, BackendDescriptor, Capabilities
from eagle_hal.device import DeviceSpec

from eagle_hal_musa.plugin import CAPABILITIES, EXTENSION

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from eagle_hal.hal.attention import AttentionBackend, AttentionConfig

__all__ = ["MusaBackend"]


class MusaBackend(Backend):
    """Moore Threads GPUs. Eager, with the pure-torch reference attention for now."""

    def __init__(self, descriptor: BackendDescriptor, device: DeviceSpec) -> None:
        super().__init__(descriptor, device)
        # torch knows the "musa" device type only once the extension is imported (torch's
        # autoload usually did it already; with TORCH_DEVICE_BACKEND_AUTOLOAD=0 it did not).
        importlib.import_module(EXTENSION)

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """The device-neutral ``TorchAttentionBackend`` (MUSA kernels come later)."""
        from eagle_hal.ops.attention_reference import TorchAttentionBackend

        return TorchAttentionBackend(config)
