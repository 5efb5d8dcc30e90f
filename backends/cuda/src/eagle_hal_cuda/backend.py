"""The CUDA backend implementation, imported only when the backend is selected."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle_hal.backend import Backend, Capabilities

from eagle_hal_cuda.plugin import CAPABILITIES

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from eagle_hal.hal.attention import AttentionBackend, AttentionConfig

__all__ = ["CudaBackend"]


class CudaBackend(Backend):
    """NVIDIA GPUs. Eager, with the pure-torch reference attention for now."""

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """The device-neutral ``TorchAttentionBackend`` (Triton kernels come later)."""
        from eagle_hal.ops.attention_reference import TorchAttentionBackend

        return TorchAttentionBackend(config)
