"""The matrix-vector Triton kernel behind ``eagle_hal.ops.triton.fused_linear``, for 16-bit
forwards of a few rows (``LaunchConfig.gemv``); the ``tl.dot`` kernel for more rows is in
``fused_linear_kernel``, the pieces both share in ``fused_linear_tiles``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from eagle_hal.ops.triton.fused_linear_tiles import (
    _dot,
    _epilogue,
    _epilogue_inputs,
    _finish,
    _input_tile,
)

__all__ = ["fused_gemv_kernel"]


# one compiled kernel for every row count
@triton.jit(do_not_specialize=["M"])
def fused_gemv_kernel(
    x_ptr, res_ptr, sum_ptr, norm_ptr, w_ptr, bias_ptr, add_ptr, cos_ptr, sin_ptr, out_ptr,
    x_stride, res_stride, w_stride, add_stride, cs_stride, out_stride,
    M, N, K, eps, half, rotary_cols, rows_per_program,
    HAS_RESIDUAL: tl.constexpr,
    HAS_NORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_ADD: tl.constexpr,
    EPILOGUE: tl.constexpr,
    BLOCK_M: tl.constexpr,  # rows per step of the row loop (padded: a row's sum order
    BLOCK_N: tl.constexpr,  # depends on BLOCK_M, never on M)
    BLOCK_K: tl.constexpr,  # >= K: the whole reduction in one tile
    PREFETCH: tl.constexpr = False,  # BLOCK_M 1: load row r + 1's inputs while row r sums
    DOT: tl.constexpr = False,  # BLOCK_M, BLOCK_N >= 16: a step's products by tl.dot
    DOT_FP32: tl.constexpr = False,  # DOT: float32 (ieee) operands, as _dot
):
    """``fused_linear_kernel``'s four projections as matrix-vector products, for few rows
    (same arguments but the split-K ones). Program ``j`` loads its ``[BLOCK_N, K]`` weight
    tile (two where the epilogue pairs columns) once, issued before anything it waits on,
    then takes the rows ``BLOCK_M`` at a time: their prologue (residual add, RMSNorm), the
    products summed over ``K`` in float32 (``tl.sum``: a fixed reduction tree over
    ``BLOCK_K`` lanes, the same for every step of ``BLOCK_M`` rows, so a row's result does
    not depend on ``M`` or the other rows), and the epilogue. No ``tl.dot`` by default: at
    a few rows its 16-row minimum tile is padding, and a launch's time is latency — one
    wave of loads instead of a loop over ``K`` tiles.

    ``DOT`` (``BLOCK_M`` and ``BLOCK_N`` >= 16, not ``PREFETCH``): the same single wave of
    weight loads, but each step's ``[BLOCK_M, BLOCK_K] x [BLOCK_K, BLOCK_N]`` product is one
    ``tl.dot`` (``_dot``) instead of a ``[BLOCK_M, BLOCK_N, BLOCK_K]`` broadcast, for
    verify batches and small decode batches. Every step is a full ``BLOCK_M``-row tile
    (padded), so a row's summation order is fixed by ``BLOCK_K`` and the launch config,
    whatever ``M`` or its place in the batch.

    Rows are dealt to the grid's second axis, ``rows_per_program`` to a program (``M``: one
    program per tile takes them all): program ``(j, g)`` takes rows ``g * rows_per_program``
    onwards. Each row group re-reads the weight tile (from L2 after the first), and a row's
    sum is the same whichever group takes it."""
    pid = tl.program_id(0)
    first_row = tl.program_id(1) * rows_per_program
    end_row = tl.minimum(first_row + rows_per_program, M)
    offsets = tl.arange(0, BLOCK_N)
    if EPILOGUE == 2:  # ROTARY: program = (head, part of its first half)
        parts = tl.cdiv(half, BLOCK_N)
        head = pid // parts
        within = (pid % parts) * BLOCK_N + offsets
        col_mask = within < half
        cols_a = head * 2 * half + within
        cols_b = cols_a + half
    else:
        head = 0
        within = offsets
        cols_a = pid * BLOCK_N + offsets
        col_mask = cols_a < N
        cols_b = cols_a + N
    ks = tl.arange(0, BLOCK_K)
    k_mask = ks < K
    w_mask = col_mask[:, None] & k_mask[None, :]
    w_a = tl.load(w_ptr + cols_a[:, None] * w_stride + ks[None, :], mask=w_mask, other=0.0)
    if EPILOGUE != 0:
        w_b = tl.load(w_ptr + cols_b[:, None] * w_stride + ks[None, :], mask=w_mask,
                      other=0.0)
    if HAS_NORM:
        gain = tl.load(norm_ptr + ks, mask=k_mask, other=0.0).to(tl.float32)
    if PREFETCH:  # one row a step; the next row's loads in flight while this one sums
        rows = tl.zeros([1], dtype=tl.int32) + first_row
        row_mask = rows < end_row
        mask = row_mask[:, None] & k_mask[None, :]
        x_raw = tl.load(x_ptr + rows[:, None] * x_stride + ks[None, :], mask=mask, other=0.0)
        res_raw = x_raw
        if HAS_RESIDUAL:
            res_raw = tl.load(res_ptr + rows[:, None] * res_stride + ks[None, :], mask=mask,
                              other=0.0)
        add, cos_first, cos_second, sin_first, sin_second = _epilogue_inputs(
            rows, row_mask, cols_a, col_mask, within, add_ptr, cos_ptr, sin_ptr, add_stride,
            cs_stride, half, HAS_ADD, EPILOGUE)
        for r in range(first_row, end_row):
            rows = tl.zeros([1], dtype=tl.int32) + r
            row_mask = rows < end_row
            mask = row_mask[:, None] & k_mask[None, :]
            following = rows + 1
            following_mask = following < end_row
            next_mask = following_mask[:, None] & k_mask[None, :]
            x_next = tl.load(x_ptr + following[:, None] * x_stride + ks[None, :],
                             mask=next_mask, other=0.0)
            res_next = x_next
            if HAS_RESIDUAL:
                res_next = tl.load(res_ptr + following[:, None] * res_stride + ks[None, :],
                                   mask=next_mask, other=0.0)
            add_n, cos_first_n, cos_second_n, sin_first_n, sin_second_n = _epilogue_inputs(
                following, following_mask, cols_a, col_mask, within, add_ptr, cos_ptr,
                sin_ptr, add_stride, cs_stride, half, HAS_ADD, EPILOGUE)
            x = x_raw
            if HAS_RESIDUAL:
                x = (x_raw.to(tl.float32) + res_raw.to(tl.float32)).to(x_raw.dtype)
                if pid == 0:
                    tl.store(sum_ptr + rows[:, None] * K + ks[None, :], x, mask=mask)
            if HAS_NORM:
                x32 = x.to(tl.float32)
                inv_rms = tl.rsqrt(tl.sum(x32 * x32, axis=1) / K + eps)
                normed = (x32 * inv_rms[:, None]).to(x.dtype)
                x = (gain[None, :] * normed.to(tl.float32)).to(x.dtype)
            x32 = x.to(tl.float32)
            acc_a = tl.sum(w_a.to(tl.float32) * x32, axis=1)[None, :]
            if EPILOGUE != 0:
                acc_b = tl.sum(w_b.to(tl.float32) * x32, axis=1)[None, :]
            else:
                acc_b = acc_a
            _finish(acc_a, acc_b, rows, row_mask, cols_a, cols_b, col_mask, head, bias_ptr,
                    out_ptr, out_stride, half, rotary_cols, add, cos_first, cos_second,
                    sin_first, sin_second, HAS_BIAS, HAS_ADD, EPILOGUE)
            x_raw = x_next
            res_raw = res_next
            add = add_n
            cos_first = cos_first_n
            cos_second = cos_second_n
            sin_first = sin_first_n
            sin_second = sin_second_n
        return
    for start in range(first_row, end_row, BLOCK_M):
        if BLOCK_M == 1:
            rows = tl.zeros([1], dtype=tl.int32) + start
        else:
            rows = start + tl.arange(0, BLOCK_M)
        row_mask = rows < end_row
        mask = row_mask[:, None] & k_mask[None, :]
        x = _input_tile(x_ptr, res_ptr, x_stride, res_stride, rows, ks, mask, HAS_RESIDUAL)
        if HAS_RESIDUAL:
            if pid == 0:  # program 0 writes the stream
                tl.store(sum_ptr + rows[:, None] * K + ks[None, :], x, mask=mask)
        if HAS_NORM:
            x32 = x.to(tl.float32)
            inv_rms = tl.rsqrt(tl.sum(x32 * x32, axis=1) / K + eps)
            normed = (x32 * inv_rms[:, None]).to(x.dtype)
            x = (gain[None, :] * normed.to(tl.float32)).to(x.dtype)
        if DOT:  # the step's rows by tl.dot: [BLOCK_M, BLOCK_K] x [BLOCK_K, BLOCK_N]
            acc_a = _dot(x, w_a, tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), DOT_FP32)
            if EPILOGUE != 0:
                acc_b = _dot(x, w_b, tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32),
                             DOT_FP32)
            else:
                acc_b = acc_a
        elif BLOCK_M == 1:
            x32 = x.to(tl.float32)  # [1, BLOCK_K]
            acc_a = tl.sum(w_a.to(tl.float32) * x32, axis=1)[None, :]  # [1, BLOCK_N]
            if EPILOGUE != 0:
                acc_b = tl.sum(w_b.to(tl.float32) * x32, axis=1)[None, :]
            else:
                acc_b = acc_a
        else:  # the chunk's rows at once: [BLOCK_M, BLOCK_N, BLOCK_K] products
            x32 = x.to(tl.float32)  # [BLOCK_M, BLOCK_K]
            acc_a = tl.sum(w_a.to(tl.float32)[None, :, :] * x32[:, None, :], axis=2)
            if EPILOGUE != 0:
                acc_b = tl.sum(w_b.to(tl.float32)[None, :, :] * x32[:, None, :], axis=2)
            else:
                acc_b = acc_a
        _epilogue(acc_a, acc_b, rows, row_mask, cols_a, cols_b, col_mask, within, head,
                  bias_ptr, add_ptr, cos_ptr, sin_ptr, out_ptr, add_stride, cs_stride,
                  out_stride, half, rotary_cols, HAS_BIAS, HAS_ADD, EPILOGUE)
