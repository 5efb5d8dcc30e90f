"""The CPU reference backend: every HAL piece in plain torch, eager, on the host."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle_hal.backend import Backend, Capabilities
from eagle_hal.backends.cpu.plugin import CAPABILITIES

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from eagle_hal.hal.attention import AttentionBackend, AttentionConfig

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    """The reference backend. No graph capture; attention is the pure-torch reference."""

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device("cpu")

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """A ``TorchAttentionBackend`` over ``config.kv_store`` (any tree-mask mode)."""
        from eagle_hal.ops.attention_reference import TorchAttentionBackend

        return TorchAttentionBackend(config)
