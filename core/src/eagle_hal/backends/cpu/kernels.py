"""The CPU backend's model kernels: the pure-torch reference, with a faster lm_head product.

The logits of a few hidden rows ``x`` ``[n, H]`` are ``x @ W.T`` with the wide vocabulary
matrix ``W`` ``[V, H]`` (SmolLM2: 49,152 x 576, 113 MB of float32). torch's ``F.linear``
at this shape took 9.4 ms for one row and 16-21 ms for 2 to 6 rows on the 2-core
development machine (torch 2.13.0+cpu, MKL 2024.2), while the same product laid out as
``W @ x.T`` took 3.1 ms for one row (given as two, as one row takes MKL's slower
matrix-vector path) and 3.2-6.7 ms for 2 to 6 rows; from about 16 rows on the two are
alike, and at 48 and more ``F.linear`` wins, so larger products keep it
(``benchmarks/cpu_logits.py`` measures both on any machine). Plain decoding computes one such
row a token, a chain's verify S + 1 and every draft step of a tree K.

``EAGLE_HAL_CPU_LOGITS=torch`` keeps ``F.linear`` (for A/B runs).
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.nn.functional as F

from eagle_hal.hal.model_kernels import ModelKernels
from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS

__all__ = ["MAX_ROWS", "cpu_model_kernels", "transposed_logits"]

# Above this many rows F.linear is as fast or faster (the transposed result's copy costs)
MAX_ROWS = 16


def transposed_logits(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` ``[n, V]`` (contiguous, in ``weight.dtype``) computed as
    ``weight @ x.T``; a single row goes in twice so that the product stays a matrix
    product. Float32 and at most ``MAX_ROWS`` rows; otherwise ``F.linear``."""
    x = x.to(weight.dtype)
    if weight.dtype != torch.float32 or x.dim() != 2 or x.shape[0] > MAX_ROWS:
        return F.linear(x, weight)
    rows = x.shape[0]
    # (a stride-0 expand of the row measured 3x slower than F.linear: MKL copies it)
    columns = x.repeat(2, 1) if rows == 1 else x
    return torch.mm(weight, columns.T).T[:rows].contiguous()


def cpu_model_kernels() -> ModelKernels:
    """The reference kernels with ``transposed_logits`` for the lm_head products, unless
    ``EAGLE_HAL_CPU_LOGITS`` is ``torch``."""
    setting = os.environ.get("EAGLE_HAL_CPU_LOGITS", "").strip().lower()
    if setting == "torch":
        return REFERENCE_MODEL_KERNELS
    if setting not in ("", "transposed"):
        raise ValueError(f"EAGLE_HAL_CPU_LOGITS={setting!r}: expected 'transposed' or 'torch'")
    return dataclasses.replace(REFERENCE_MODEL_KERNELS, name="cpu", logits=transposed_logits)
