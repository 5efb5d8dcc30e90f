"""The elementwise and normalisation kernels a model's layers call, chosen per backend.

A decoder layer's GEMMs are torch's; what lies between them (RMSNorm, the residual add,
rotary, SwiGLU's gate) is a handful of tiny operations that a fused kernel does in one
launch each. ``Backend.model_kernels()`` hands the model one ``ModelKernels``: the
pure-torch reference (``eagle_hal.ops.reference_model``) unless the backend has faster ones,
such as the Triton kernels of ``eagle_hal.ops.triton.model_kernels``. The model receives
it through ``eagle_hal.model.fusion.fuse_for_inference``.

Every implementation must match the reference's numerics: float32 statistics and angles,
each intermediate rounded to the activation dtype where the reference rounds it. Kernels
are for inference: they need not support autograd.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

__all__ = ["ModelKernels"]


@dataclasses.dataclass(frozen=True, slots=True)
class ModelKernels:
    """One implementation of each model kernel. Shapes: ``T`` tokens, ``H`` hidden size."""

    name: str
    # (x [T, H], weight [H], eps) -> x / rms(x) * weight, [T, H] in x.dtype
    rms_norm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    # (x [T, H], residual [T, H], weight [H], eps) -> (rms_norm(x + residual), x + residual);
    # the sum is rounded to x.dtype before it is normalised. Inputs are left unchanged.
    add_rms_norm: Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]
    ]
    # (q [T, Hq, D], k [T, Hk, D], cos [T, D], sin [T, D]) -> rotated (q, k), new tensors of
    # the same shapes (half-split pairing, as HF Llama). q and k may be strided views (rows
    # of a fused QKV output) whose last dimension is contiguous.
    rotary: Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
    ]
    # gate_up [T, 2 * I] (gate columns, then up columns) -> silu(gate) * up, [T, I]
    silu_mul: Callable[[torch.Tensor], torch.Tensor]
