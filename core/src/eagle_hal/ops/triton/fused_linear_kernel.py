"""The Triton kernel behind ``eagle_hal.ops.triton.fused_linear`` (see its docstring for
what the four projections compute and their numerics).

Program ``(j, s)`` of the ``tiles x splits`` grid computes output tile ``j`` (two where the
epilogue pairs columns) over split ``s`` of the reduction: ``blocks_per_split`` blocks of
``BLOCK_K`` from ``s * blocks_per_split * BLOCK_K``. Without ``SPLIT_K`` there is one split,
the whole of ``K``, and the program finishes the tile itself. With it, the program stores
its float32 partials at ``partials[s, j]``, then adds 1 to ``arrivals[j]``; the program that
finds ``splits - 1`` there is the last, adds ``partials[0, j]``, ``partials[1, j]``, ... in
that order, finishes the tile and stores 0 back. Ordering: each program's threads store,
meet at a barrier, then one thread's acquire-release add publishes the stores (release is
cumulative over what the barrier ordered before it); the last program's acquire, passed to
its other threads through a barrier, orders its L2 (``.cg``) loads of the partials after
the other programs' stores. No program waits for another, so any number of splits and any
scheduling of programs terminate.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["fused_gemv_kernel", "fused_linear_kernel"]


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


# one compiled kernel for every row count and every number of blocks per split
@triton.jit(do_not_specialize=["M", "blocks_per_split"])
def fused_linear_kernel(
    x_ptr,  # [M, K], row stride x_stride
    res_ptr,  # [M, K], row stride res_stride (read if HAS_RESIDUAL)
    sum_ptr,  # out [M, K] contiguous: x + residual (written by the tile-0 programs)
    norm_ptr,  # [K] RMSNorm weight (read if HAS_NORM)
    w_ptr,  # [N_w, K], row stride w_stride
    bias_ptr,  # [N_w] (read if HAS_BIAS)
    add_ptr,  # [M, N], row stride add_stride (read if HAS_ADD; PLAIN only)
    cos_ptr,  # [M, 2 * half], row stride cs_stride (ROTARY only)
    sin_ptr,  # [M, 2 * half], row stride cs_stride (ROTARY only)
    out_ptr,  # out [M, N], row stride out_stride
    partials_ptr,  # SPLIT_K: [splits, tiles, 2, M, BLOCK_N] float32 scratch
    arrivals_ptr,  # SPLIT_K: [>= tiles] int32 arrival counters, 0 between launches
    x_stride,
    res_stride,
    w_stride,
    add_stride,
    cs_stride,
    out_stride,
    M,
    N,  # output columns (SILU_MUL: the intermediate size; its up rows start at N)
    K,
    eps,
    half,  # ROTARY: half the head dimension
    rotary_cols,  # ROTARY: output columns [0, rotary_cols) are rotated (q and k heads)
    blocks_per_split,  # SPLIT_K: BLOCK_K blocks of K per split (the last may have fewer)
    HAS_RESIDUAL: tl.constexpr,
    HAS_NORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_ADD: tl.constexpr,
    EPILOGUE: tl.constexpr,
    DOT_FP32: tl.constexpr,
    SPLIT_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)  # the tile
    rows = tl.arange(0, BLOCK_M)
    row_mask = rows < M
    offsets = tl.arange(0, BLOCK_N)
    if EPILOGUE == 2:  # ROTARY: program = (head, part of its first half)
        parts = tl.cdiv(half, BLOCK_N)
        head = pid // parts
        within = (pid % parts) * BLOCK_N + offsets  # dimensions within the first half
        col_mask = within < half
        cols_a = head * 2 * half + within
        cols_b = cols_a + half  # the partner dimensions in the second half
    else:
        head = 0
        within = offsets
        cols_a = pid * BLOCK_N + offsets
        col_mask = cols_a < N
        cols_b = cols_a + N  # SILU_MUL: the up projection's rows

    if HAS_NORM:  # the inverse RMS over the whole row, whatever part of K this program sums
        squares = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start in range(0, K, BLOCK_K):
            ks = start + tl.arange(0, BLOCK_K)
            mask = row_mask[:, None] & (ks < K)[None, :]
            x32 = _input_tile(x_ptr, res_ptr, x_stride, res_stride, rows, ks, mask,
                              HAS_RESIDUAL).to(tl.float32)
            squares += tl.sum(x32 * x32, axis=1)
        inv_rms = tl.rsqrt(squares / K + eps)

    if SPLIT_K:
        split = tl.program_id(1)
        k_begin = split * blocks_per_split * BLOCK_K
        k_end = tl.minimum(k_begin + blocks_per_split * BLOCK_K, K)
    else:
        k_begin = 0
        k_end = K
    acc_a = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(k_begin, k_end, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        k_mask = ks < K
        mask = row_mask[:, None] & k_mask[None, :]
        x = _input_tile(x_ptr, res_ptr, x_stride, res_stride, rows, ks, mask, HAS_RESIDUAL)
        if HAS_RESIDUAL:
            # the tile-0 programs write the stream, each split its own part of K: once
            first = (rows[:, None] * 0 + pid) == 0
            tl.store(sum_ptr + rows[:, None] * K + ks[None, :], x, mask=mask & first)
        if HAS_NORM:
            normed = (x.to(tl.float32) * inv_rms[:, None]).to(x.dtype)
            gain = tl.load(norm_ptr + ks, mask=k_mask, other=0.0).to(tl.float32)
            x = (gain[None, :] * normed.to(tl.float32)).to(x.dtype)
        w_mask = col_mask[:, None] & k_mask[None, :]
        w_a = tl.load(w_ptr + cols_a[:, None] * w_stride + ks[None, :], mask=w_mask, other=0.0)
        acc_a = _dot(x, w_a, acc_a, DOT_FP32)
        if EPILOGUE != 0:
            w_b = tl.load(w_ptr + cols_b[:, None] * w_stride + ks[None, :], mask=w_mask,
                          other=0.0)
            acc_b = _dot(x, w_b, acc_b, DOT_FP32)

    if SPLIT_K:
        splits = tl.num_programs(1)
        tile_size = M * BLOCK_N  # one [M, BLOCK_N] partial
        within_tile = rows[:, None] * BLOCK_N + offsets[None, :]
        own = partials_ptr + (split * tl.num_programs(0) + pid) * 2 * tile_size + within_tile
        tl.store(own, acc_a, mask=row_mask[:, None])
        if EPILOGUE != 0:
            tl.store(own + tile_size, acc_b, mask=row_mask[:, None])
        # Every thread's partial stores precede the barrier; the release half of the
        # atomic publishes them (cumulatively) to the program that arrives last, whose
        # acquire half orders its loads of the partials after every other program's stores.
        tl.debug_barrier()
        arrived = tl.atomic_add(arrivals_ptr + pid, 1, sem="acq_rel", scope="gpu")
        if arrived == splits - 1:  # the last of the tile's programs: finish the tile
            tl.debug_barrier()
            acc_a = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            acc_b = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for part in range(0, splits):  # split order, whichever program arrived last
                theirs = partials_ptr + (part * tl.num_programs(0) + pid) * 2 * tile_size
                # .cg: read from L2, where the other SMs' stores are, never a stale L1 line
                acc_a += tl.load(theirs + within_tile, mask=row_mask[:, None], other=0.0,
                                 cache_modifier=".cg")
                if EPILOGUE != 0:
                    acc_b += tl.load(theirs + tile_size + within_tile, mask=row_mask[:, None],
                                     other=0.0, cache_modifier=".cg")
            _epilogue(acc_a, acc_b, rows, row_mask, cols_a, cols_b, col_mask, within, head,
                      bias_ptr, add_ptr, cos_ptr, sin_ptr, out_ptr, add_stride, cs_stride,
                      out_stride, half, rotary_cols, HAS_BIAS, HAS_ADD, EPILOGUE)
            tl.store(arrivals_ptr + pid, 0)  # all splits have arrived: ready for next launch
    else:
        _epilogue(acc_a, acc_b, rows, row_mask, cols_a, cols_b, col_mask, within, head,
                  bias_ptr, add_ptr, cos_ptr, sin_ptr, out_ptr, add_stride, cs_stride,
                  out_stride, half, rotary_cols, HAS_BIAS, HAS_ADD, EPILOGUE)


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
