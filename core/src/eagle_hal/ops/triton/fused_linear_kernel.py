"""The ``tl.dot`` Triton kernel behind ``eagle_hal.ops.triton.fused_linear`` (see its
docstring for what the four projections compute and their numerics); the matrix-vector
kernel for a few rows is in ``fused_gemv_kernel``, the pieces both share in
``fused_linear_tiles``.

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

from eagle_hal.ops.triton.fused_linear_tiles import _dot, _epilogue, _input_tile

__all__ = ["fused_linear_kernel"]


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
