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

One Triton kernel (``fused_linear_kernel``) does all four. Program ``j`` computes one
``[BLOCK_M, BLOCK_N]`` tile of ``x @ W.T`` (two tiles where the epilogue pairs columns: gate
with up, a rotary half with its partner), with the prologue — residual add, then the rows'
inverse RMS over the whole row — recomputed by every program: the rows are a few hundred
values each.

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
sizes share a launch config; 17 to 32 rows take 32-row tiles and, by default, narrower
reduction tiles: another summation order.

For a few 16-bit rows (``GEMV_ROWS``, the decode step of a small batch, a draft step)
``default_config`` takes a second kernel, ``fused_gemv_kernel``: the same four
projections as matrix-vector products without ``tl.dot``, each program's whole weight
tile loaded in one wave. It halves the layer's time at one row (a launch there is
latency, and the ``tl.dot`` kernel walks ``K`` tile by tile with 16-row padding) but sums
in another order than the ``tl.dot`` kernel, so in 16-bit a decoded token and the same
token in a larger verify batch may round differently (see ``default_config``). Its dot
mode (``LaunchConfig.dot``) keeps the one wave of weight loads but multiplies 16 or 32
rows at a time with ``tl.dot``, for verify batches and small decode batches (chosen by a
``LaunchPolicy``'s ``wide``, ``forced`` or ``gemv``; not a default: on an H200
``benchmarks/bench_fused_linear.py --rows 1,6,16 --configs g16x8x16d`` shows it no faster
than the ``tl.dot`` kernel at 1-16 rows).

For 16-bit forwards of more rows than the gemv split, up to 64 (verify passes, draft
extends, small decode batches), ``small_m_config`` takes a third kernel where the weight is
small enough (``SMALL_M_MAX_WEIGHT``): ``small_m_kernel``, which splits the reduction into
one weight tile per program, loaded once and multiplied by all the rows, so that a launch
over 64 rows costs about what one row's does. Its rows sum in another order than the other
two kernels', fixed by the reduction length and the padded row block (16, 32, 64).

A bundle made with ``dependent_launch`` (``fused_linear_kernels``; the default backends
make it where ``Capabilities.dependent_launch`` says the device has programmatic dependent
launch) launches the small-M kernel so that its weight loads overlap the previous kernel
(see ``small_m_kernel``); the bits are the same either way. The interpreter never takes it.

Roundings follow the reference (``eagle_hal.ops.reference_model`` and torch's GEMMs):
the stream sum, the normed rows, each projection's output, SiLU and each rotary product
are rounded to the activation dtype where the unfused ops round them; only the order of
the float32 sums differs. Float32 models get float32 (``ieee``) dot operands, never TF32.
Under ``TRITON_INTERPRET=1`` the kernels run on CPU tensors (16-bit operands are widened to
float32 for the dot, as the interpreter multiplies bfloat16 as raw integers).

This module checks the arguments, picks each projection's launch and starts the kernel.
The launches (``LaunchConfig``, ``LaunchPolicy``, ``default_config``) are in
``fused_linear_config``, the kernels in ``fused_linear_kernel``, ``fused_gemv_kernel`` and
``small_m_kernel``.
``fused_linear_kernels`` bundles the three projections for a model's ``ModelKernels``,
under the shipped launch policy or another one (to measure it end to end).
"""

from __future__ import annotations

import functools

import torch
import triton

from eagle_hal import settings
from eagle_hal.hal.model_kernels import FusedLinearKernels
from eagle_hal.ops.reference_checks import next_power_of_2
from eagle_hal.ops.triton.fused_gemv_kernel import fused_gemv_kernel
from eagle_hal.ops.triton.fused_linear_config import (
    DEFAULT_POLICY,
    GEMV_DOT_MAX_PER_THREAD,
    GEMV_MAX_TILE,
    LaunchConfig,
    LaunchPolicy,
    default_config,
    small_m_config,
)
from eagle_hal.ops.triton.fused_linear_kernel import fused_linear_kernel
from eagle_hal.ops.triton.small_m_kernel import small_m_kernel

__all__ = [
    "FUSED_LINEAR_KERNELS",
    "MAX_TOKENS",
    "MAX_TOKENS_16BIT",
    "LaunchConfig",  # from fused_linear_config: the type of every ``config`` argument
    "LaunchPolicy",  # from fused_linear_config: the type of every ``policy`` argument
    "fused_linear_kernels",
    "gate_up_silu",
    "linear",
    "qkv_rotary",
]

MAX_TOKENS = 64  # rows per forward up to which a layer takes the fused path
# Rows up to which a 16-bit forward takes the fused path by default; larger ones run
# faster through the GEMMs. ``benchmarks/bench_fused_linear.py --rows 8,16,17,24,32``
# (SmolLM2-135M's layer, bf16) gives on an H100 35.1-35.4 us fused (32-row tiles, 64-wide
# reductions) against 24.0-24.4 us unfused (cuBLAS with the Triton norm, rotary and SiLU)
# at 17-32 rows, and 23.2-23.3 against 24.0-24.3 at 8 and 16 (on an H200, 36.0 against
# 24.0 at 32 rows): up to 16 rows the fused layer is the faster one. Batch 2's verify pass
# of N = 16 trees (32 rows) and plain decoding at batch 17-32 fall in that range.
MAX_TOKENS_16BIT = 16

_PLAIN, _SILU_MUL, _ROTARY = 0, 1, 2


def _dot_in_float32(dtype: torch.dtype) -> bool:
    return dtype == torch.float32 or settings.triton_interpreted()


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
    config: LaunchConfig,
    dependent_launch: bool = False,
) -> None:
    rows, k = x.shape
    if weight.shape[1] != k or weight.stride(-1) != 1:
        raise ValueError(f"weight {tuple(weight.shape)} does not take {k} input features")
    if rows == 0:
        return
    if config.gemv:
        per_program = config.rows_per_program or rows
        fused_gemv_kernel[(tiles, triton.cdiv(rows, per_program))](
            x, residual if residual is not None else x, total if total is not None else x,
            norm_weight if norm_weight is not None else x, weight,
            bias if bias is not None else weight, add if add is not None else x,
            cos if cos is not None else x, sin if sin is not None else x, out,
            x.stride(0), residual.stride(0) if residual is not None else 0, weight.stride(0),
            add.stride(0) if add is not None else 0,
            cos.stride(0) if cos is not None else 0, out.stride(0),
            rows, n, k, eps, half, rotary_cols, per_program,
            HAS_RESIDUAL=residual is not None, HAS_NORM=norm_weight is not None,
            HAS_BIAS=bias is not None, HAS_ADD=add is not None, EPILOGUE=epilogue,
            BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=next_power_of_2(k),
            PREFETCH=config.prefetch, DOT=config.dot, DOT_FP32=_dot_in_float32(x.dtype),
            num_warps=config.num_warps,
        )
        return
    if config.small_m:
        _launch_small_m(x, weight, out, tiles, n, epilogue, residual, total, norm_weight, eps,
                        bias, add, cos, sin, half, rotary_cols, config, dependent_launch)
        return
    splits, per_split = _split(k, config)
    if splits > 1:
        # [splits, tiles, a/b columns, rows, block_n]: each program's float32 partial sums
        partials = torch.empty((splits, tiles, 2, rows, config.block_n), dtype=torch.float32,
                               device=x.device)
        arrivals = _arrivals(x.device, tiles)
    else:
        partials = arrivals = out  # not read
    cs = cos if cos is not None else x
    fused_linear_kernel[(tiles, splits)](
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


def _launch_small_m(
    x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, tiles: int, n: int,
    epilogue: int, residual: torch.Tensor | None, total: torch.Tensor | None,
    norm_weight: torch.Tensor | None, eps: float, bias: torch.Tensor | None,
    add: torch.Tensor | None, cos: torch.Tensor | None, sin: torch.Tensor | None, half: int,
    rotary_cols: int, config: LaunchConfig, dependent_launch: bool,
) -> None:
    """``small_m_kernel`` over ``tiles`` x ``ceil(K / block_k)`` programs."""
    rows, k = x.shape
    if rows > 64:
        raise ValueError(f"{rows} rows: the small-M kernel takes at most 64")
    block_k = config.block_k
    splits = triton.cdiv(k, block_k)
    if splits > 1:
        partials = torch.empty((splits, tiles, 2, rows, config.block_n), dtype=torch.float32,
                               device=x.device)
        arrivals = _arrivals(x.device, tiles)
    else:
        partials = arrivals = out  # not read
    # the programmatic dependent launch is compiled code only; the interpreter runs plain
    pdl = dependent_launch and not settings.triton_interpreted()
    cs = cos if cos is not None else x
    extra = {"launch_pdl": True} if pdl else {}
    small_m_kernel[(tiles, splits)](
        x, residual if residual is not None else x, total if total is not None else x,
        norm_weight if norm_weight is not None else x, weight,
        bias if bias is not None else weight, add if add is not None else x,
        cs, sin if sin is not None else cs, out, partials, arrivals,
        x.stride(0), residual.stride(0) if residual is not None else 0, weight.stride(0),
        add.stride(0) if add is not None else 0, cs.stride(0), out.stride(0),
        rows, n, k, eps, half, rotary_cols,
        HAS_RESIDUAL=residual is not None, HAS_NORM=norm_weight is not None,
        HAS_BIAS=bias is not None, HAS_ADD=add is not None, EPILOGUE=epilogue,
        DOT_FP32=_dot_in_float32(x.dtype), SPLIT_K=splits > 1,
        BLOCK_M=max(16, next_power_of_2(rows)), BLOCK_N=config.block_n, BLOCK_K=block_k,
        NORM_BLOCK=min(block_k, 128), USE_PDL=pdl, num_warps=config.num_warps, **extra,
    )


def _config_for(
    x: torch.Tensor, k: int, paired: bool, config: LaunchConfig | None,
    policy: LaunchPolicy = DEFAULT_POLICY, out_rows: int | None = None,
) -> LaunchConfig:
    """The launch for ``x``'s rows over a reduction of ``k``: ``config``, else the one
    ``policy`` gives; a gemv config whose tiles would not fit (``GEMV_MAX_TILE``; in dot
    mode ``GEMV_DOT_MAX_PER_THREAD``) becomes the ``tl.dot`` kernel's default. Depends on
    ``k`` and the row count's config only, so every row count up to 16 keeps one summation
    order. ``out_rows`` (the weight's rows): the small-M kernel is considered first
    (``small_m_config``)."""
    if config is None and out_rows is not None:
        config = small_m_config(x.dtype, x.shape[0], out_rows, k, paired, policy)
    config = config or default_config(x.dtype, x.shape[0], policy)
    if config.gemv:
        weight_tile = next_power_of_2(k) * config.block_n * (2 if paired else 1)  # elements
        if config.dot:  # the weight tile(s) and a step's [block_m, K] rows at once
            input_tile = next_power_of_2(k) * config.block_m
            # a float32 product takes twice the registers and shared memory (on the H200
            # SmolLM2's float32 QKV in g16x8x16d asked for 448 KiB of shared memory)
            width = 2 if x.dtype == torch.float32 else 1
            budget = GEMV_DOT_MAX_PER_THREAD * 32 * config.num_warps
            fits = (weight_tile + input_tile) * width <= budget
        else:  # a step's [block_m, block_n, K] products
            fits = weight_tile * config.block_m <= GEMV_MAX_TILE
        if not fits:  # the tl.dot kernel's tiles as default_config gives them
            wide = x.dtype == torch.float32 or x.shape[0] > 16
            return LaunchConfig(block_k=64 if wide else 256)
    return config


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
    policy: LaunchPolicy = DEFAULT_POLICY,
    dependent_launch: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """See ``FusedLinearKernels.qkv_rotary``; ``config``: the launch (default: the one
    ``policy`` picks for the rows and the weight); ``dependent_launch``: the small-M
    kernel overlaps the previous kernel (a device with programmatic dependent launch)."""
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
    config = _config_for(x, weight.shape[1], True, config, policy, width)
    _launch(
        x, weight, out, heads * triton.cdiv(half, config.block_n), width, _ROTARY,
        residual=residual, total=total, norm_weight=norm_weight, eps=eps, bias=bias,
        cos=cos, sin=sin, half=half, rotary_cols=(num_heads + num_kv_heads) * head_dim,
        config=config, dependent_launch=dependent_launch,
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
    policy: LaunchPolicy = DEFAULT_POLICY,
    dependent_launch: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """See ``FusedLinearKernels.gate_up_silu``; ``config``, ``policy`` and
    ``dependent_launch`` as for ``qkv_rotary``."""
    x = _rows(x, "x")
    _check_rows(x)
    if weight.shape[0] % 2:
        raise ValueError(f"gate_up weight rows must be even, got {weight.shape[0]}")
    width = weight.shape[0] // 2
    residual, total = _stream(x, residual)
    out = torch.empty((x.shape[0], width), dtype=x.dtype, device=x.device)
    config = _config_for(x, weight.shape[1], True, config, policy, weight.shape[0])
    _launch(
        x, weight, out, triton.cdiv(width, config.block_n), width, _SILU_MUL,
        residual=residual, total=total, norm_weight=norm_weight, eps=eps, config=config,
        dependent_launch=dependent_launch,
    )
    return out, total


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    add: torch.Tensor | None = None,
    *,
    config: LaunchConfig | None = None,
    policy: LaunchPolicy = DEFAULT_POLICY,
    dependent_launch: bool = False,
) -> torch.Tensor:
    """See ``FusedLinearKernels.linear``; ``config``, ``policy`` and ``dependent_launch``
    as for ``qkv_rotary``."""
    x = _rows(x, "x")
    _check_rows(x)
    width = weight.shape[0]
    if add is not None:
        if add.shape != (x.shape[0], width):
            raise ValueError(f"add {tuple(add.shape)} must be [{x.shape[0]}, {width}]")
        add = _rows(add, "add")
    out = torch.empty((x.shape[0], width), dtype=x.dtype, device=x.device)
    config = _config_for(x, weight.shape[1], False, config, policy, width)
    _launch(
        x, weight, out, triton.cdiv(width, config.block_n), width, _PLAIN, bias=bias, add=add,
        config=config, dependent_launch=dependent_launch,
    )
    return out


def fused_linear_kernels(
    policy: LaunchPolicy = DEFAULT_POLICY, max_tokens_16bit: int = MAX_TOKENS_16BIT,
    dependent_launch: bool = False,
) -> FusedLinearKernels:
    """The three projections as ``FusedLinearKernels``, launched under ``policy``, for
    forwards of up to ``MAX_TOKENS`` rows (16-bit ones up to ``max_tokens_16bit``, 1 to
    ``MAX_TOKENS``), with programmatic dependent launch where ``dependent_launch`` (a
    device whose backend declares ``Capabilities.dependent_launch``). The defaults are
    ``FUSED_LINEAR_KERNELS``; others measure another choice end to end, e.g.
    ``dataclasses.replace(kernels, fused_linear=fused_linear_kernels(max_tokens_16bit=32))``
    for a model's kernels."""
    if policy == DEFAULT_POLICY and not dependent_launch:
        functions = qkv_rotary, gate_up_silu, linear
    else:
        options = {"policy": policy, "dependent_launch": True} if dependent_launch else {
            "policy": policy}
        functions = tuple(functools.partial(f, **options)
                          for f in (qkv_rotary, gate_up_silu, linear))
    return FusedLinearKernels(
        max_tokens=MAX_TOKENS,
        qkv_rotary=functions[0],
        gate_up_silu=functions[1],
        linear=functions[2],
        max_tokens_16bit=max_tokens_16bit,
    )


FUSED_LINEAR_KERNELS = fused_linear_kernels()
