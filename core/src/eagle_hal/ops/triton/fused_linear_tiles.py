"""The ``@triton.jit`` pieces both fused projection kernels share (``fused_linear_kernel``
and ``fused_gemv_kernel``): the input tile with its residual add, the product, and the
epilogue (bias, then SiLU * up, rotary or an added tensor, each rounded as the unfused ops
round it).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__: list[str] = []  # the pieces are private to the two kernel modules


@triton.jit
def _input_tile(x_ptr, res_ptr, x_stride, res_stride, rows, cols, mask,
                HAS_RESIDUAL: tl.constexpr):
    """``[BLOCK_M, BLOCK_K]`` of the input rows: ``x``, or ``x + residual`` rounded to
    ``x``'s dtype."""
    x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0)
    if HAS_RESIDUAL:
        res = tl.load(res_ptr + rows[:, None] * res_stride + cols[None, :], mask=mask,
                      other=0.0)
        x = (x.to(tl.float32) + res.to(tl.float32)).to(x.dtype)
    return x


@triton.jit
def _dot(x, w, acc, DOT_FP32: tl.constexpr):
    """``acc + x @ w.T`` for ``x`` ``[M, K]``, ``w`` ``[N, K]``."""
    if DOT_FP32:
        acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc,
                     input_precision="ieee")
    else:
        acc = tl.dot(x, tl.trans(w), acc)
    return acc


@triton.jit
def _epilogue_inputs(rows, row_mask, cols_a, col_mask, within, add_ptr, cos_ptr, sin_ptr,
                     add_stride, cs_stride, half, HAS_ADD: tl.constexpr,
                     EPILOGUE: tl.constexpr):
    """The epilogue's per-row inputs as float32 ``[rows, BLOCK_N]`` tiles: the added
    tensor (PLAIN with HAS_ADD), cos and sin of both rotary halves (ROTARY); zeros where
    the epilogue takes none."""
    out_mask = row_mask[:, None] & col_mask[None, :]
    zero = (rows[:, None] + within[None, :] * 0).to(tl.float32) * 0.0
    add = zero
    cos_first = zero
    cos_second = zero
    sin_first = zero
    sin_second = zero
    if EPILOGUE == 0:
        if HAS_ADD:
            add = tl.load(add_ptr + rows[:, None] * add_stride + cols_a[None, :], mask=out_mask,
                          other=0.0).to(tl.float32)
    elif EPILOGUE == 2:
        cs = rows[:, None] * cs_stride + within[None, :]
        cos_first = tl.load(cos_ptr + cs, mask=out_mask, other=0.0).to(tl.float32)
        cos_second = tl.load(cos_ptr + cs + half, mask=out_mask, other=0.0).to(tl.float32)
        sin_first = tl.load(sin_ptr + cs, mask=out_mask, other=0.0).to(tl.float32)
        sin_second = tl.load(sin_ptr + cs + half, mask=out_mask, other=0.0).to(tl.float32)
    return add, cos_first, cos_second, sin_first, sin_second


@triton.jit
def _finish(acc_a, acc_b, rows, row_mask, cols_a, cols_b, col_mask, head, bias_ptr, out_ptr,
            out_stride, half, rotary_cols, add, cos_first, cos_second, sin_first, sin_second,
            HAS_BIAS: tl.constexpr, HAS_ADD: tl.constexpr, EPILOGUE: tl.constexpr):
    """Store the finished tile(s) from the float32 sums ``acc_a`` (and ``acc_b``, the
    paired columns) and the epilogue's inputs (``_epilogue_inputs``): bias, then the
    epilogue's roundings, then ``out``."""
    dtype = out_ptr.dtype.element_ty
    if HAS_BIAS:
        acc_a += tl.load(bias_ptr + cols_a, mask=col_mask, other=0.0).to(tl.float32)[None, :]
        if EPILOGUE != 0:
            acc_b += tl.load(bias_ptr + cols_b, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    out_mask = row_mask[:, None] & col_mask[None, :]
    out_a = out_ptr + rows[:, None] * out_stride + cols_a[None, :]
    if EPILOGUE == 0:
        y = acc_a.to(dtype)
        if HAS_ADD:
            y = (add + y.to(tl.float32)).to(dtype)
        tl.store(out_a, y, mask=out_mask)
    elif EPILOGUE == 1:
        gate = acc_a.to(dtype).to(tl.float32)
        up = acc_b.to(dtype).to(tl.float32)
        activated = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
        tl.store(out_a, (activated * up).to(dtype), mask=out_mask)
    else:
        first = acc_a.to(dtype).to(tl.float32)
        second = acc_b.to(dtype).to(tl.float32)
        # x * cos + rotate_half(x) * sin, rotate_half(x) = [-second, first]; each op rounds
        rotated_first = (first * cos_first).to(dtype).to(tl.float32) + (
            -second * sin_first
        ).to(dtype).to(tl.float32)
        rotated_second = (second * cos_second).to(dtype).to(tl.float32) + (
            first * sin_second
        ).to(dtype).to(tl.float32)
        rotate = head * 2 * half < rotary_cols
        first = tl.where(rotate, rotated_first, first)
        second = tl.where(rotate, rotated_second, second)
        tl.store(out_a, first.to(dtype), mask=out_mask)
        tl.store(out_ptr + rows[:, None] * out_stride + cols_b[None, :], second.to(dtype),
                 mask=out_mask)


@triton.jit
def _epilogue(acc_a, acc_b, rows, row_mask, cols_a, cols_b, col_mask, within, head,
              bias_ptr, add_ptr, cos_ptr, sin_ptr, out_ptr, add_stride, cs_stride, out_stride,
              half, rotary_cols, HAS_BIAS: tl.constexpr, HAS_ADD: tl.constexpr,
              EPILOGUE: tl.constexpr):
    """``_epilogue_inputs`` then ``_finish``."""
    add, cos_first, cos_second, sin_first, sin_second = _epilogue_inputs(
        rows, row_mask, cols_a, col_mask, within, add_ptr, cos_ptr, sin_ptr, add_stride,
        cs_stride, half, HAS_ADD, EPILOGUE)
    _finish(acc_a, acc_b, rows, row_mask, cols_a, cols_b, col_mask, head, bias_ptr, out_ptr,
            out_stride, half, rotary_cols, add, cos_first, cos_second, sin_first, sin_second,
            HAS_BIAS, HAS_ADD, EPILOGUE)
