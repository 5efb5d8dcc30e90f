"""The weight-streaming Triton kernel behind ``eagle_hal.ops.triton.fused_linear`` for
forwards of 2 to 64 rows (verify passes, draft extends, small decode batches): the same
four projections as ``fused_linear_kernel`` (see ``fused_linear``'s docstring for what
they compute and their numerics), laid out so that a launch costs about what one row's
costs.

At these row counts a projection of a small model is bound by launch latency and one read
of its weight, never by arithmetic: 64 rows of SmolLM2-135M's gate/up projection are
113 MFLOP, well under a microsecond of tensor-core time, against 3.5 MB of weight. So the
grid is as wide as the weight allows, and each program streams one weight tile once:

* program ``(j, s)`` owns output tile ``j`` (``BLOCK_N`` columns, two tiles where the
  epilogue pairs columns: gate with up, a rotary half with its partner) and reduction
  split ``s``, the ``BLOCK_K`` features from ``s * BLOCK_K``: one ``[BLOCK_N, BLOCK_K]``
  weight tile, loaded in one wave before anything the program waits on;
* it multiplies that tile by all ``M`` rows at once, padded to ``BLOCK_M`` (16, 32 or 64)
  for one ``tl.dot``, and sums in float32;
* with more than one split, the float32 partial tiles meet as in ``fused_linear_kernel``'s
  split-K: stored in a workspace, an acquire-release arrival counter per tile, the last
  program to arrive adding them in split order, applying the epilogue and resetting the
  counter. Results are deterministic, and a row's summation order depends on ``K``,
  ``BLOCK_K`` and ``BLOCK_M`` only, never on the other rows.

The RMSNorm prologue needs the inverse RMS of each whole row, so with several splits
every program first sums the squares of its rows over all of ``K`` (``NORM_BLOCK`` at a
time, from L2 after the first program), then normalises its own ``BLOCK_K`` features.

``USE_PDL`` (programmatic dependent launch, on a device whose backend declares it and
only compiled, never interpreted): the weight and norm gain loads — model parameters,
which no kernel of a forward writes — are issued before ``gdc_wait``, so they overlap the
tail of the previous kernel; everything the previous kernel may have written (the rows,
the residual, cos/sin, the added tensor, the workspace and counters) is read, and every
store made, after it. The program then lets the next kernel launch (``gdc_launch_dependents``),
whose own wait still holds it until this grid has finished and its stores are visible.
Without ``USE_PDL`` neither call is compiled in.
"""

from __future__ import annotations

import triton
import triton.language as tl

from eagle_hal.ops.triton.fused_linear_tiles import _dot, _epilogue, _input_tile

__all__ = ["small_m_kernel"]


# one compiled kernel for every row count of a BLOCK_M
@triton.jit(do_not_specialize=["M"])
def small_m_kernel(
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
    HAS_RESIDUAL: tl.constexpr,
    HAS_NORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_ADD: tl.constexpr,
    EPILOGUE: tl.constexpr,
    DOT_FP32: tl.constexpr,
    SPLIT_K: tl.constexpr,  # more than one BLOCK_K split (else BLOCK_K >= K)
    BLOCK_M: tl.constexpr,  # rows, padded: 16, 32 or 64
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,  # one split's features, loaded as one tile
    NORM_BLOCK: tl.constexpr,  # SPLIT_K with HAS_NORM: features per step of the squares
    USE_PDL: tl.constexpr = False,
):
    pid = tl.program_id(0)  # the tile
    split = tl.program_id(1)
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

    # The parameters first: one wave of loads, in flight while the program waits
    ks = split * BLOCK_K + tl.arange(0, BLOCK_K)
    k_mask = ks < K
    w_mask = col_mask[:, None] & k_mask[None, :]
    w_a = tl.load(w_ptr + cols_a[:, None] * w_stride + ks[None, :], mask=w_mask, other=0.0)
    w_b = w_a
    if EPILOGUE != 0:
        w_b = tl.load(w_ptr + cols_b[:, None] * w_stride + ks[None, :], mask=w_mask,
                      other=0.0)
    if HAS_NORM:
        gain = tl.load(norm_ptr + ks, mask=k_mask, other=0.0).to(tl.float32)
    if USE_PDL:  # what the previous kernel wrote is read from here on
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()

    rows = tl.arange(0, BLOCK_M)
    row_mask = rows < M
    mask = row_mask[:, None] & k_mask[None, :]
    x = _input_tile(x_ptr, res_ptr, x_stride, res_stride, rows, ks, mask, HAS_RESIDUAL)
    if HAS_RESIDUAL:
        # the tile-0 programs write the stream, each split its own features: once
        first = (rows[:, None] * 0 + pid) == 0
        tl.store(sum_ptr + rows[:, None] * K + ks[None, :], x, mask=mask & first)
    if HAS_NORM:
        if SPLIT_K:  # the inverse RMS over the whole row, whatever part of K this sums
            squares = tl.zeros([BLOCK_M], dtype=tl.float32)
            for start in range(0, K, NORM_BLOCK):
                norm_ks = start + tl.arange(0, NORM_BLOCK)
                norm_mask = row_mask[:, None] & (norm_ks < K)[None, :]
                whole = _input_tile(x_ptr, res_ptr, x_stride, res_stride, rows, norm_ks,
                                    norm_mask, HAS_RESIDUAL).to(tl.float32)
                squares += tl.sum(whole * whole, axis=1)
        else:  # this tile is the whole row
            x32 = x.to(tl.float32)
            squares = tl.sum(x32 * x32, axis=1)
        inv_rms = tl.rsqrt(squares / K + eps)
        normed = (x.to(tl.float32) * inv_rms[:, None]).to(x.dtype)
        x = (gain[None, :] * normed.to(tl.float32)).to(x.dtype)

    acc_a = _dot(x, w_a, tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), DOT_FP32)
    acc_b = acc_a
    if EPILOGUE != 0:
        acc_b = _dot(x, w_b, tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), DOT_FP32)

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
