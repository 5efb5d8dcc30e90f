"""The CPU backend's model kernels: the pure-torch reference, with its GEMMs laid out the
way MKL streams weights fastest.

A forward of a few rows ``x`` ``[n, In]`` reads every weight ``W`` ``[Out, In]`` once from
memory: SmolLM2-135M's 30 layers are 425 MB of float32, its ``lm_head`` 113 MB more, too
much for any cache, so the rate at which a GEMM streams ``W`` sets the speed of decoding.
torch's ``F.linear`` (``x @ W.T``) streams at about 12 GB/s on the 2-core development
machine (torch 2.13.0+cpu, MKL 2024.2); the same product laid out as ``W @ x.T`` at about
36 GB/s for up to four rows. ``python benchmarks/cpu_gemm.py`` measures both on any
machine, weights streamed from memory as in a forward; on that machine:

* the 30 layers' projections at one row: 34.6 ms with ``F.linear``, 16.6 ms transposed;
  2-4 rows 46-56 ms against 15-21 ms; 6-16 rows still 11-14 % faster;
* the ``lm_head`` (49,152 rows): one row 9.6 ms against 3.1 ms, 2-6 rows 16.6-21.6 ms
  against 3.1-6.8 ms; from 16 rows on the two are alike and ``F.linear`` is kept.

A single row goes in twice (MKL's one-column path is the slow one; a stride-0 ``expand``
of the row was slower still). So the CPU backend supplies the reference kernels with
``FusedLinearKernels`` (forwards of at most ``MAX_ROWS`` rows: the projections run
transposed between the reference's norm, rotary and gate, which is what the layers' fused
path calls) and ``logits`` (the ``lm_head`` products). Float32 only: other dtypes take
``F.linear`` inside the same kernels. ``cpu_model_kernels(gemm="torch")`` switches both
off (to compare the two end to end: ``LLM(model_kernels=...)``).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from eagle_hal.hal.model_kernels import FusedLinearKernels, ModelKernels
from eagle_hal.ops import reference_model as reference

__all__ = [
    "CPU_FUSED_LINEAR", "MAX_ROWS", "cpu_model_kernels", "gate_up_silu", "linear",
    "qkv_rotary", "transposed_product",
]

# Above this many rows F.linear is as fast or faster (the transposed result's copy costs)
MAX_ROWS = 16


def transposed_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` ``[n, Out]`` (contiguous, in ``weight.dtype``) computed as
    ``weight @ x.T``; a single row goes in twice so that the product stays a matrix
    product. Float32 and at most ``MAX_ROWS`` rows; otherwise ``F.linear``."""
    x = x.to(weight.dtype)
    if weight.dtype != torch.float32 or x.dim() != 2 or x.shape[0] > MAX_ROWS:
        return F.linear(x, weight)
    rows = x.shape[0]
    columns = x.repeat(2, 1) if rows == 1 else x
    return torch.mm(weight, columns.T).T[:rows].contiguous()


def _normed_and_stream(
    x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The projection's input ``[norm](x [+ residual])`` and the stream (``x`` itself
    without a residual), by the reference kernels."""
    if residual is None:
        normed = x if norm_weight is None else reference.rms_norm(x, norm_weight, eps)
        return normed, x
    if norm_weight is None:
        stream = x + residual
        return stream, stream
    return reference.add_rms_norm(x, residual, norm_weight, eps)


def qkv_rotary(
    x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None,
    eps: float, weight: torch.Tensor, bias: torch.Tensor | None, cos: torch.Tensor,
    sin: torch.Tensor, num_heads: int, num_kv_heads: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``FusedLinearKernels.qkv_rotary``: q and k rotated, v, and the stream."""
    normed, stream = _normed_and_stream(x, residual, norm_weight, eps)
    qkv = transposed_product(normed, weight)
    if bias is not None:
        qkv = qkv + bias
    rows, head_dim = x.shape[0], cos.shape[-1]
    q, k, v = qkv.split([num_heads * head_dim, num_kv_heads * head_dim,
                         num_kv_heads * head_dim], dim=-1)
    q, k = reference.rotary(q.view(rows, num_heads, head_dim),
                            k.view(rows, num_kv_heads, head_dim), cos, sin)
    return q, k, v.view(rows, num_kv_heads, head_dim), stream


def gate_up_silu(
    x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None,
    eps: float, weight: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``FusedLinearKernels.gate_up_silu``: ``silu(gate) * up`` and the stream."""
    normed, stream = _normed_and_stream(x, residual, norm_weight, eps)
    return reference.silu_mul(transposed_product(normed, weight)), stream


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
    add: torch.Tensor | None,
) -> torch.Tensor:
    """``FusedLinearKernels.linear``: ``x @ weight.T [+ bias] [+ add]``."""
    out = transposed_product(x, weight)
    if bias is not None:
        out = out + bias
    return out if add is None else add + out


CPU_FUSED_LINEAR = FusedLinearKernels(
    max_tokens=MAX_ROWS, qkv_rotary=qkv_rotary, gate_up_silu=gate_up_silu, linear=linear
)


def cpu_model_kernels(gemm: str = "transposed") -> ModelKernels:
    """The reference kernels with the transposed GEMMs (``CPU_FUSED_LINEAR`` and
    ``logits``); ``gemm="torch"``: the reference kernels alone (``F.linear`` everywhere)."""
    if gemm == "torch":
        return reference.REFERENCE_MODEL_KERNELS
    if gemm != "transposed":
        raise ValueError(f"gemm={gemm!r}: expected 'transposed' or 'torch'")
    return dataclasses.replace(reference.REFERENCE_MODEL_KERNELS, name="cpu",
                               fused_linear=CPU_FUSED_LINEAR, logits=transposed_product)
