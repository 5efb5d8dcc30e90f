"""A decoder layer's projections fused with the kernels around them, for forwards of a few
tokens.

At decode, draft and small verify shapes every GEMM of a decoder layer is a
matrix-vector product whose cost is a launch and one read of the weight, and the norms,
rotary and SwiGLU's gate between the GEMMs are launches of their own. With these kernels a
layer takes four launches besides its attention:

    [residual add +] RMSNorm + Q/K/V projection + rotary   -> q, k, v and the stream
    O projection
    residual add + RMSNorm + gate/up projection + silu(gate) * up
    down projection [+ an added tensor]

One Triton kernel does all four. Program ``j`` computes one ``[BLOCK_M, BLOCK_N]`` tile of
``x @ W.T`` (two tiles where the epilogue pairs columns: gate with up, a rotary half with
its partner), with the prologue — residual add, then the rows' inverse RMS over the whole
row — recomputed by every program: the rows are a few hundred values each.

With ``LaunchConfig.splits`` 1 a program reduces over the whole of ``K``. With more, the
reduction is split (split-K): the grid is tiles x splits, program ``(j, s)`` reduces over
the ``s``-th run of ``BLOCK_K`` blocks and stores its float32 partial tiles in a workspace,
then bumps tile ``j``'s arrival counter (acquire-release). The last program to arrive adds
the partials in the fixed order split 0, 1, ..., applies the epilogue, stores the output
and sets the counter back to 0 for the next launch (and graph replay). The counters are a
persistent zeroed buffer per device, so launches on one device must be stream-ordered, as
they are in a model's forward. Either way results are deterministic, and a row's
summation order does not depend on the other rows: the split boundaries depend on ``K``,
``block_k`` and ``splits`` only. A token therefore gives the same projection bit for bit
alone or in a verify batch of up to 16 rows, for any ``splits``, as long as the batch
sizes share a launch config (they do under ``default_config``); 17 to 32 rows take
32-row tiles and, by default, narrower reduction tiles: another summation order.

Roundings follow the reference (``eagle_hal.ops.reference_model`` and torch's GEMMs):
the stream sum, the normed rows, each projection's output, SiLU and each rotary product
are rounded to the activation dtype where the unfused ops round them; only the order of
the float32 sums differs. Float32 models get float32 (``ieee``) dot operands, never TF32.
Under ``TRITON_INTERPRET=1`` the kernels run on CPU tensors (16-bit operands are widened to
float32 for the dot, as the interpreter multiplies bfloat16 as raw integers).
"""

from __future__ import annotations

import dataclasses
import os

import torch
import triton
import triton.language as tl

from eagle_hal.hal.model_kernels import FusedLinearKernels
from eagle_hal.ops.reference_checks import next_power_of_2

__all__ = [
    "FUSED_LINEAR_KERNELS",
    "MAX_TOKENS",
    "LaunchConfig",
    "gate_up_silu",
    "linear",
    "qkv_rotary",
]

MAX_TOKENS = 32  # rows per forward up to which a layer takes the fused path

_PLAIN, _SILU_MUL, _ROTARY = 0, 1, 2


@dataclasses.dataclass(frozen=True, slots=True)
class LaunchConfig:
    """Tile sizes and launch parameters (``block_n`` >= 16: ``tl.dot``'s minimum).
    ``splits``: how many programs share a tile's reduction (1: one program per tile walks
    the whole of ``K``). It is an upper bound: a projection with fewer ``block_k`` blocks
    takes fewer splits, and blocks are dealt so that no split is empty."""

    block_n: int = 16
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 3
    splits: int = 1

    def __post_init__(self) -> None:
        if self.block_n < 16 or self.block_k < 16:
            raise ValueError(f"block_n and block_k must be >= 16, got {self}")
        if self.num_warps < 1 or self.num_stages < 1 or self.splits < 1:
            raise ValueError(f"num_warps, num_stages and splits must be >= 1, got {self}")


def default_config(dtype: torch.dtype, rows: int) -> LaunchConfig:
    """The launch for ``rows`` rows of ``dtype``. 16-bit rows up to 16 take 256-wide
    reduction tiles: on an H200, SmolLM2-135M's layer (attention excluded) then takes
    21.5-22.9 us against 28.2-29.3 with 128-wide tiles and 23.7-24.0 unfused
    (``benchmarks/bench_fused_linear.py``, docs/benchmarks/README.md); float32 and 32 rows
    take 64-wide tiles (register pressure). No split-K by default until an H200 sweep
    (``bench_fused_linear.py``'s fifth config field) has measured it: set ``splits`` below.
    Rows 1 to 16 must keep one config, or a row alone and in a batch sum differently."""
    if dtype == torch.float32 or rows > 16:
        return LaunchConfig(block_k=64)
    return LaunchConfig(block_k=256, splits=1)


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
def _epilogue(acc_a, acc_b, rows, row_mask, cols_a, cols_b, col_mask, within, head,
              bias_ptr, add_ptr, cos_ptr, sin_ptr, out_ptr, add_stride, cs_stride, out_stride,
              half, rotary_cols, HAS_BIAS: tl.constexpr, HAS_ADD: tl.constexpr,
              EPILOGUE: tl.constexpr):
    """Store the finished tile(s) from the float32 sums ``acc_a`` (and ``acc_b``, the
    paired columns): bias, then the epilogue's roundings, then ``out``."""
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
            add = tl.load(add_ptr + rows[:, None] * add_stride + cols_a[None, :], mask=out_mask,
                          other=0.0)
            y = (add.to(tl.float32) + y.to(tl.float32)).to(dtype)
        tl.store(out_a, y, mask=out_mask)
    elif EPILOGUE == 1:
        gate = acc_a.to(dtype).to(tl.float32)
        up = acc_b.to(dtype).to(tl.float32)
        activated = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
        tl.store(out_a, (activated * up).to(dtype), mask=out_mask)
    else:
        first = acc_a.to(dtype).to(tl.float32)
        second = acc_b.to(dtype).to(tl.float32)
        cs = rows[:, None] * cs_stride + within[None, :]
        cos_first = tl.load(cos_ptr + cs, mask=out_mask, other=0.0).to(tl.float32)
        cos_second = tl.load(cos_ptr + cs + half, mask=out_mask, other=0.0).to(tl.float32)
        sin_first = tl.load(sin_ptr + cs, mask=out_mask, other=0.0).to(tl.float32)
        sin_second = tl.load(sin_ptr + cs + half, mask=out_mask, other=0.0).to(tl.float32)
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


# one compiled kernel for every row count and every number of blocks per split
@triton.jit(do_not_specialize=["M", "blocks_per_split"])
def _fused_linear_kernel(
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


def _dot_in_float32(dtype: torch.dtype) -> bool:
    return dtype == torch.float32 or os.environ.get("TRITON_INTERPRET") == "1"


def _rows(x: torch.Tensor, name: str) -> torch.Tensor:
    if x.dim() != 2:
        raise ValueError(f"{name} must be [tokens, features], got {tuple(x.shape)}")
    return x if x.stride(-1) == 1 else x.contiguous()


def _check_rows(x: torch.Tensor) -> None:
    if x.shape[0] > MAX_TOKENS:
        raise ValueError(f"{x.shape[0]} rows: the fused projections take at most {MAX_TOKENS}")


# Arrival counters per device, all 0 between launches. Sized for the largest grid seen;
# the first launch of a shape (a warm-up, before any graph capture) grows them.
_ARRIVALS: dict[torch.device, torch.Tensor] = {}
_MIN_ARRIVALS = 4096


def _arrivals(device: torch.device, tiles: int) -> torch.Tensor:
    """At least ``tiles`` int32 counters on ``device``, all 0."""
    counters = _ARRIVALS.get(device)
    if counters is None or counters.numel() < tiles:
        counters = torch.zeros(max(tiles, _MIN_ARRIVALS), dtype=torch.int32, device=device)
        _ARRIVALS[device] = counters
    return counters


def _split(k: int, config: LaunchConfig) -> tuple[int, int]:
    """(splits, blocks per split) for a reduction over ``k``: at most ``config.splits``
    splits of whole ``block_k`` blocks, none empty. Depends on ``k`` and the config only,
    never on the rows, so a row's summation order is the same in any batch."""
    blocks = triton.cdiv(k, config.block_k)
    per_split = triton.cdiv(blocks, min(config.splits, blocks))
    return triton.cdiv(blocks, per_split), per_split


def _launch(
    x: torch.Tensor,
    weight: torch.Tensor,
    out: torch.Tensor,
    tiles: int,
    n: int,
    epilogue: int,
    *,
    residual: torch.Tensor | None = None,
    total: torch.Tensor | None = None,
    norm_weight: torch.Tensor | None = None,
    eps: float = 0.0,
    bias: torch.Tensor | None = None,
    add: torch.Tensor | None = None,
    cos: torch.Tensor | None = None,
    sin: torch.Tensor | None = None,
    half: int = 0,
    rotary_cols: int = 0,
    config: LaunchConfig | None = None,
) -> None:
    rows, k = x.shape
    if weight.shape[1] != k or weight.stride(-1) != 1:
        raise ValueError(f"weight {tuple(weight.shape)} does not take {k} input features")
    if rows == 0:
        return
    config = config or default_config(x.dtype, rows)
    splits, per_split = _split(k, config)
    if splits > 1:
        # [splits, tiles, a/b columns, rows, block_n]: each program's float32 partial sums
        partials = torch.empty((splits, tiles, 2, rows, config.block_n), dtype=torch.float32,
                               device=x.device)
        arrivals = _arrivals(x.device, tiles)
    else:
        partials = arrivals = out  # not read
    cs = cos if cos is not None else x
    _fused_linear_kernel[(tiles, splits)](
        x, residual if residual is not None else x, total if total is not None else x,
        norm_weight if norm_weight is not None else x, weight,
        bias if bias is not None else weight, add if add is not None else x,
        cs, sin if sin is not None else cs, out, partials, arrivals,
        x.stride(0), residual.stride(0) if residual is not None else 0, weight.stride(0),
        add.stride(0) if add is not None else 0, cs.stride(0), out.stride(0),
        rows, n, k, eps, half, rotary_cols, per_split,
        HAS_RESIDUAL=residual is not None, HAS_NORM=norm_weight is not None,
        HAS_BIAS=bias is not None, HAS_ADD=add is not None, EPILOGUE=epilogue,
        DOT_FP32=_dot_in_float32(x.dtype), SPLIT_K=splits > 1,
        BLOCK_M=max(16, next_power_of_2(rows)), BLOCK_N=config.block_n,
        BLOCK_K=config.block_k, num_warps=config.num_warps, num_stages=config.num_stages,
    )


def _stream(
    x: torch.Tensor, residual: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The residual to add (contiguous rows, or ``None``) and the tensor the stream sum
    goes to (``x`` itself when there is no residual)."""
    if residual is None:
        return None, x
    if residual.shape != x.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} differ")
    return _rows(residual, "residual"), torch.empty(x.shape, dtype=x.dtype, device=x.device)


def qkv_rotary(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor | None,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    *,
    config: LaunchConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """See ``FusedLinearKernels.qkv_rotary``."""
    x = _rows(x, "x")
    _check_rows(x)
    heads = num_heads + 2 * num_kv_heads
    width = weight.shape[0]
    head_dim = width // heads
    if width != heads * head_dim or head_dim % 2:
        raise ValueError(f"weight rows {width} are not {heads} heads of an even dimension")
    if cos.shape != (x.shape[0], head_dim) or sin.shape != cos.shape:
        raise ValueError(f"cos/sin must be [{x.shape[0]}, {head_dim}], got {tuple(cos.shape)}")
    residual, total = _stream(x, residual)
    cos, sin = _rows(cos, "cos"), _rows(sin, "sin")
    if sin.stride(0) != cos.stride(0):
        sin = sin.contiguous()
        cos = cos.contiguous()
    out = torch.empty((x.shape[0], width), dtype=x.dtype, device=x.device)
    half = head_dim // 2
    config = config or default_config(x.dtype, x.shape[0])
    _launch(
        x, weight, out, heads * triton.cdiv(half, config.block_n), width, _ROTARY,
        residual=residual, total=total, norm_weight=norm_weight, eps=eps, bias=bias,
        cos=cos, sin=sin, half=half, rotary_cols=(num_heads + num_kv_heads) * head_dim,
        config=config,
    )
    q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
    q, k, v = out.split([q_size, kv_size, kv_size], dim=-1)
    tokens = x.shape[0]
    return (
        q.view(tokens, num_heads, head_dim),
        k.view(tokens, num_kv_heads, head_dim),
        v.view(tokens, num_kv_heads, head_dim),
        total,
    )


def gate_up_silu(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor | None,
    eps: float,
    weight: torch.Tensor,
    *,
    config: LaunchConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``FusedLinearKernels.gate_up_silu``."""
    x = _rows(x, "x")
    _check_rows(x)
    if weight.shape[0] % 2:
        raise ValueError(f"gate_up weight rows must be even, got {weight.shape[0]}")
    width = weight.shape[0] // 2
    residual, total = _stream(x, residual)
    out = torch.empty((x.shape[0], width), dtype=x.dtype, device=x.device)
    config = config or default_config(x.dtype, x.shape[0])
    _launch(
        x, weight, out, triton.cdiv(width, config.block_n), width, _SILU_MUL,
        residual=residual, total=total, norm_weight=norm_weight, eps=eps, config=config,
    )
    return out, total


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    add: torch.Tensor | None = None,
    *,
    config: LaunchConfig | None = None,
) -> torch.Tensor:
    """See ``FusedLinearKernels.linear``."""
    x = _rows(x, "x")
    _check_rows(x)
    width = weight.shape[0]
    if add is not None:
        if add.shape != (x.shape[0], width):
            raise ValueError(f"add {tuple(add.shape)} must be [{x.shape[0]}, {width}]")
        add = _rows(add, "add")
    out = torch.empty((x.shape[0], width), dtype=x.dtype, device=x.device)
    config = config or default_config(x.dtype, x.shape[0])
    _launch(
        x, weight, out, triton.cdiv(width, config.block_n), width, _PLAIN, bias=bias, add=add,
        config=config,
    )
    return out


FUSED_LINEAR_KERNELS = FusedLinearKernels(
    max_tokens=MAX_TOKENS,
    qkv_rotary=qkv_rotary,
    gate_up_silu=gate_up_silu,
    linear=linear,
)
