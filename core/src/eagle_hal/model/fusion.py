"""Preparing built models for inference: fused projections and the backend's kernels.

Applied from outside, like tensor parallelism: ``fuse_for_inference`` walks a model's
modules, runs Q/K/V and gate/up as one GEMM each (fusing what each module holds, so a
tensor-parallel rank fuses its own shards) and installs a backend's ``ModelKernels``.
Parameter names, ``state_dict`` and loading are unchanged: fused parameters become views
of the fused weights. Training never calls it; a fused model is for inference only (its
fused parameters no longer require grad, and the kernels need not support autograd).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from eagle_hal.hal.model_kernels import ModelKernels
from eagle_hal.model.layers import MLP, Attention, RMSNorm

__all__ = ["fuse_for_inference"]


def fuse_for_inference(kernels: ModelKernels, *models: Any) -> None:
    """Fuse the projections of every ``nn.Module`` in ``models`` and install ``kernels``
    in their layers (``None`` and other objects are skipped). Idempotent; call it again
    after moving or casting a model (``.to()`` gives the parameters fresh storage)."""
    for model in models:
        if not isinstance(model, nn.Module):
            continue
        for module in model.modules():
            if isinstance(module, (Attention, MLP)):
                module.fuse_projections()
            if isinstance(module, (Attention, MLP, RMSNorm)):
                module.kernels = kernels
