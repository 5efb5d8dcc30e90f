"""The pure-torch ``ModelKernels``: the numerics every fused implementation must match.

Follows Hugging Face transformers' Llama: RMSNorm in float32, cast back to the activation
dtype before the weight multiply; rotary as ``x * cos + rotate_half(x) * sin`` in the
activation dtype. Runs on any device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from eagle_hal.hal.model_kernels import ModelKernels

__all__ = [
    "REFERENCE_MODEL_KERNELS",
    "add_rms_norm",
    "apply_rotary",
    "rms_norm",
    "rotary",
    "silu_mul",
]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / rms(x) * weight`` over the last dimension, normalised in float32."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual), x + residual)``."""
    total = x + residual
    return rms_norm(total, weight, eps), total


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[T, heads, head_dim]`` by ``cos``/``sin`` ``[T, head_dim]``."""
    return x * cos[:, None, :] + _rotate_half(x) * sin[:, None, :]


def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``apply_rotary`` to queries ``[T, Hq, D]`` and keys ``[T, Hk, D]``."""
    return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of ``gate_up`` ``[T, 2 * I]`` -> ``[T, I]``."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


REFERENCE_MODEL_KERNELS = ModelKernels(
    name="reference",
    rms_norm=rms_norm,
    add_rms_norm=add_rms_norm,
    rotary=rotary,
    silu_mul=silu_mul,
)
