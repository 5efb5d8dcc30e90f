"""Triton ``ModelKernels``: RMSNorm (optionally with the residual add), rotary on q and k,
and SwiGLU's ``silu(gate) * up``, one launch each; for forwards of a few tokens, the
projections fused with them (``eagle_hal.ops.triton.fused_linear``); the draft's softmax +
top-k over the vocabulary in two launches (``eagle_hal.ops.triton.topk_kernels``).

Each kernel reproduces the reference's roundings (``eagle_hal.ops.reference_model``):
products and sums are formed in float32 and rounded to the activation dtype wherever the
reference's half-precision ops round, so bfloat16 results agree with it up to the order of
the RMS reduction. One program per token row; blocks are masked powers of two, so any
hidden size, head count or head dimension (even) works. Under ``TRITON_INTERPRET=1`` the
kernels run on CPU tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from eagle_hal.hal.model_kernels import ModelKernels
from eagle_hal.ops.reference_checks import next_power_of_2
from eagle_hal.ops.triton.fused_linear import FUSED_LINEAR_KERNELS
from eagle_hal.ops.triton.topk_kernels import softmax_topk

__all__ = ["TRITON_MODEL_KERNELS", "add_rms_norm", "rms_norm", "rotary", "silu_mul"]

_SILU_BLOCK = 1024  # columns of silu(gate) * up per program


@triton.jit
def _rms_norm_kernel(
    x_ptr,  # [T, H], row stride x_stride
    residual_ptr,  # [T, H], row stride residual_stride (read only if HAS_RESIDUAL)
    weight_ptr,  # [H]
    out_ptr,  # out [T, H] contiguous
    sum_ptr,  # out [T, H] contiguous: x + residual (written only if HAS_RESIDUAL)
    x_stride,
    residual_stride,
    hidden,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        residual = tl.load(residual_ptr + row * residual_stride + cols, mask=mask, other=0.0)
        total = (x.to(tl.float32) + residual.to(tl.float32)).to(sum_ptr.dtype.element_ty)
        tl.store(sum_ptr + row * hidden + cols, total, mask=mask)
        x = total
    x32 = x.to(tl.float32)
    mean_square = tl.sum(x32 * x32, axis=0) / hidden
    normed = (x32 * tl.rsqrt(mean_square + eps)).to(x.dtype)  # rounded, as the reference
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0)
    out = weight.to(tl.float32) * normed.to(tl.float32)
    tl.store(out_ptr + row * hidden + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rotate_heads(
    src_ptr,  # this token's first head
    dst_ptr,  # this token's first output head (contiguous heads)
    head_stride,
    num_heads,
    half,
    cos_first,
    cos_second,
    sin_first,
    sin_second,  # [1, BLOCK_HALF] float32 each
    BLOCK_HEADS: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    heads = tl.arange(0, BLOCK_HEADS)[:, None]
    cols = tl.arange(0, BLOCK_HALF)[None, :]
    mask = (heads < num_heads) & (cols < half)
    src = src_ptr + heads * head_stride + cols
    first = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    second = tl.load(src + half, mask=mask, other=0.0).to(tl.float32)
    dtype = dst_ptr.dtype.element_ty
    # x * cos + rotate_half(x) * sin, rotate_half(x) = [-second, first]; each op rounds.
    out_first = (first * cos_first).to(dtype).to(tl.float32) + (-second * sin_first).to(
        dtype
    ).to(tl.float32)
    out_second = (second * cos_second).to(dtype).to(tl.float32) + (first * sin_second).to(
        dtype
    ).to(tl.float32)
    dst = dst_ptr + heads * (2 * half) + cols
    tl.store(dst, out_first.to(dtype), mask=mask)
    tl.store(dst + half, out_second.to(dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr,  # [T, Hq, D], strides (q_token_stride, q_head_stride, 1)
    k_ptr,  # [T, Hk, D], strides (k_token_stride, k_head_stride, 1)
    cos_ptr,  # [T, D], row stride cos_stride
    sin_ptr,  # [T, D], row stride sin_stride
    q_out_ptr,  # out [T, Hq, D] contiguous
    k_out_ptr,  # out [T, Hk, D] contiguous
    q_token_stride,
    q_head_stride,
    k_token_stride,
    k_head_stride,
    cos_stride,
    sin_stride,
    num_q_heads,
    num_k_heads,
    half,
    BLOCK_Q: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_HALF)[None, :]
    cmask = cols < half
    cos_row = cos_ptr + token * cos_stride + cols
    sin_row = sin_ptr + token * sin_stride + cols
    cos_first = tl.load(cos_row, mask=cmask, other=0.0).to(tl.float32)
    cos_second = tl.load(cos_row + half, mask=cmask, other=0.0).to(tl.float32)
    sin_first = tl.load(sin_row, mask=cmask, other=0.0).to(tl.float32)
    sin_second = tl.load(sin_row + half, mask=cmask, other=0.0).to(tl.float32)
    _rotate_heads(
        q_ptr + token * q_token_stride, q_out_ptr + token * num_q_heads * 2 * half,
        q_head_stride, num_q_heads, half, cos_first, cos_second, sin_first, sin_second,
        BLOCK_Q, BLOCK_HALF,
    )
    _rotate_heads(
        k_ptr + token * k_token_stride, k_out_ptr + token * num_k_heads * 2 * half,
        k_head_stride, num_k_heads, half, cos_first, cos_second, sin_first, sin_second,
        BLOCK_K, BLOCK_HALF,
    )


@triton.jit
def _silu_mul_kernel(
    gate_up_ptr,  # [T, 2 * I], row stride gate_up_stride
    out_ptr,  # out [T, I] contiguous
    gate_up_stride,
    width,  # I
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < width
    gate = tl.load(gate_up_ptr + row * gate_up_stride + cols, mask=mask, other=0.0)
    up = tl.load(gate_up_ptr + row * gate_up_stride + width + cols, mask=mask, other=0.0)
    gate32 = gate.to(tl.float32)
    activated = (gate32 / (1.0 + tl.exp(-gate32))).to(gate.dtype)  # silu rounds, as torch's
    out = activated.to(tl.float32) * up.to(tl.float32)
    tl.store(out_ptr + row * width + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[rows, last]`` with a contiguous last dimension (a view when possible)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    return x.reshape(-1, x.shape[-1])


def _norm_launch(hidden: int) -> tuple[int, int]:
    block = next_power_of_2(hidden)
    return block, 4 if block <= 2048 else 8


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / rms(x) * weight`` over the last dimension (see ``ModelKernels.rms_norm``)."""
    rows = _rows(x)
    hidden = rows.shape[-1]
    out = torch.empty(rows.shape, dtype=torch.result_type(weight, x), device=x.device)
    if rows.shape[0]:
        block, warps = _norm_launch(hidden)
        _rms_norm_kernel[(rows.shape[0],)](
            rows, rows, weight.contiguous(), out, out, rows.stride(0), rows.stride(0),
            hidden, eps, HAS_RESIDUAL=False, BLOCK=block, num_warps=warps,
        )
    return out.view(x.shape)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual), x + residual)`` (see ``ModelKernels.add_rms_norm``)."""
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} differ")
    rows, residual_rows = _rows(x), _rows(residual)
    hidden = rows.shape[-1]
    total = torch.empty(rows.shape, dtype=torch.result_type(x, residual), device=x.device)
    out = torch.empty(rows.shape, dtype=torch.result_type(weight, total), device=x.device)
    if rows.shape[0]:
        block, warps = _norm_launch(hidden)
        _rms_norm_kernel[(rows.shape[0],)](
            rows, residual_rows, weight.contiguous(), out, total, rows.stride(0),
            residual_rows.stride(0), hidden, eps, HAS_RESIDUAL=True, BLOCK=block,
            num_warps=warps,
        )
    return out.view(x.shape), total.view(x.shape)


def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotated ``(q, k)`` as new contiguous tensors (see ``ModelKernels.rotary``)."""
    num_tokens, num_q_heads, head_dim = q.shape
    num_k_heads = k.shape[1]
    if head_dim % 2 or k.shape[0] != num_tokens or k.shape[2] != head_dim:
        raise ValueError(f"q {tuple(q.shape)} / k {tuple(k.shape)}: need [T, H, even D]")
    if cos.shape != (num_tokens, head_dim) or sin.shape != cos.shape:
        raise ValueError(f"cos/sin must be [{num_tokens}, {head_dim}], got {tuple(cos.shape)}")
    q, k = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k))
    cos, sin = (t if t.stride(-1) == 1 else t.contiguous() for t in (cos, sin))
    q_out = torch.empty(q.shape, dtype=torch.result_type(q, cos), device=q.device)
    k_out = torch.empty(k.shape, dtype=torch.result_type(k, cos), device=k.device)
    if num_tokens:
        half = head_dim // 2
        _rotary_kernel[(num_tokens,)](
            q, k, cos, sin, q_out, k_out, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            cos.stride(0), sin.stride(0), num_q_heads, num_k_heads, half,
            BLOCK_Q=next_power_of_2(num_q_heads), BLOCK_K=next_power_of_2(num_k_heads),
            BLOCK_HALF=next_power_of_2(half), num_warps=4,
        )
    return q_out, k_out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of ``gate_up`` ``[..., 2 * I]`` (see ``ModelKernels.silu_mul``)."""
    rows = _rows(gate_up)
    if rows.shape[-1] % 2:
        raise ValueError(f"gate_up's last dimension must be even, got {rows.shape[-1]}")
    width = rows.shape[-1] // 2
    out = torch.empty((rows.shape[0], width), dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0]:
        block = min(_SILU_BLOCK, next_power_of_2(width))
        _silu_mul_kernel[(rows.shape[0], triton.cdiv(width, block))](
            rows, out, rows.stride(0), width, BLOCK=block, num_warps=4
        )
    return out.view(*gate_up.shape[:-1], width)


TRITON_MODEL_KERNELS = ModelKernels(
    name="triton",
    rms_norm=rms_norm,
    add_rms_norm=add_rms_norm,
    rotary=rotary,
    silu_mul=silu_mul,
    fused_linear=FUSED_LINEAR_KERNELS,
    softmax_topk=softmax_topk,
)
