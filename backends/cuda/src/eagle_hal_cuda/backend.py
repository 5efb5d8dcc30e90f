"""The CUDA backend implementation, imported only when the backend is selected.

Attention is eagle-hal's device-neutral Triton paged attention (``ops/triton``), the tree
and sampling operations are the fused Triton ``SamplingOps``, and forwards are captured as
CUDA graphs by the core's graph runner. FlashInfer is not used yet.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from eagle_hal.plugin_api import Backend, Capabilities, Tolerances

from eagle_hal_cuda.plugin import CAPABILITIES

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from eagle_hal.plugin_api import (
        AttentionBackend,
        AttentionConfig,
        GraphCapture,
        KVLayout,
        SamplingOps,
    )

__all__ = ["CudaBackend"]


class CudaBackend(Backend):
    """NVIDIA GPUs: Triton attention and sampling ops, CUDA-graph capture."""

    @property
    def capabilities(self) -> Capabilities:
        """The plugin's ``CAPABILITIES``, with ``dependent_launch`` on a GPU of compute
        capability 9.0 or later (Hopper on: programmatic dependent launch)."""
        return _bound_capabilities(self.device_spec.torch_device_string)

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """A ``TritonAttentionBackend`` (tree_block masks, NHD or HND storage)."""
        from eagle_hal.plugin_api import TritonAttentionBackend

        return TritonAttentionBackend(config)

    def sampling_ops(self) -> SamplingOps:
        """The fused Triton ``SamplingOps`` (the reference for the rest)."""
        from eagle_hal.plugin_api import TritonSamplingOps

        return TritonSamplingOps()

    def graph_capture(self) -> GraphCapture | None:
        """CUDA graphs (``torch.accelerator.Graph`` where torch has it) on this device."""
        from eagle_hal_cuda.graphs import CudaGraphCapture

        return CudaGraphCapture(self.torch_device)

    def kv_layout(self) -> KVLayout:
        """NHD storage (``[slots, kv_heads, head_dim]``), int64 slots, any page size."""
        from eagle_hal.plugin_api import KVLayout

        return KVLayout(order="NHD", page_size=1, slot_dtype="int64")

    def tolerances(self) -> Tolerances:
        """Float32 accumulation everywhere; half-precision bounds are those of the
        activations' rounding."""
        return Tolerances(
            atol={"float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3},
            rtol={"float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3},
        )


@functools.cache
def _bound_capabilities(device: str) -> Capabilities:
    return dataclasses.replace(CAPABILITIES, dependent_launch=_has_dependent_launch(device))


def _has_dependent_launch(device: str) -> bool:
    """Whether the GPU ``device`` names has programmatic dependent launch (compute
    capability 9.0 or later); ``False`` where it cannot be asked (no such device)."""
    import torch

    try:
        major, _ = torch.cuda.get_device_capability(torch.device(device))
    except (AssertionError, RuntimeError, ValueError):
        return False
    return major >= 9
