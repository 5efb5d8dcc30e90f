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
rows at a time with ``tl.dot``, for verify batches and small decode batches (chosen by
``EAGLE_HAL_FUSED_LINEAR_WIDE``, ``EAGLE_HAL_FUSED_LINEAR_CONFIG`` or ``EAGLE_HAL_GEMV``;
not a default: on the H200 it was no faster than the ``tl.dot`` kernel at 1-16 rows).

Roundings follow the reference (``eagle_hal.ops.reference_model`` and torch's GEMMs):
the stream sum, the normed rows, each projection's output, SiLU and each rotary product
are rounded to the activation dtype where the unfused ops round them; only the order of
the float32 sums differs. Float32 models get float32 (``ieee``) dot operands, never TF32.
Under ``TRITON_INTERPRET=1`` the kernels run on CPU tensors (16-bit operands are widened to
float32 for the dot, as the interpreter multiplies bfloat16 as raw integers).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import torch
import triton

from eagle_hal.hal.model_kernels import FusedLinearKernels
from eagle_hal.ops.reference_checks import next_power_of_2
from eagle_hal.ops.triton.fused_linear_kernel import fused_gemv_kernel, fused_linear_kernel

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
    takes fewer splits, and blocks are dealt so that no split is empty.

    ``gemv``: the matrix-vector kernel (``fused_gemv_kernel``) instead: ``block_n`` output
    columns per program (any power of two), the whole of ``K`` in one tile (``block_k``,
    ``num_stages`` and ``splits`` unused), ``block_m`` rows per step of its row loop. Where
    a step's products (``block_m`` x the program's weight elements) would exceed
    ``GEMV_MAX_TILE`` the projection takes the ``tl.dot`` kernel's default.

    ``dot`` (gemv, ``block_m`` and ``block_n`` >= 16): each step's ``block_m`` rows (padded)
    times the weight tile by ``tl.dot`` instead of a broadcast product; the limit is then
    ``GEMV_DOT_MAX_PER_THREAD``, the weight and input tiles' elements per thread.

    ``rows_per_program`` (gemv): the rows are dealt over a second grid axis, this many to a
    program, each group re-reading the weight tile (from L2 after the first group); 0 (the
    default): one program per tile takes every row in its row loop. A row's sum does not
    depend on its group, so this changes the time, never the bits."""

    block_n: int = 16
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 3
    splits: int = 1
    gemv: bool = False
    block_m: int = 1  # gemv: rows per step of its row loop (a power of two)
    prefetch: bool = False  # gemv, block_m 1: the next row's loads issued before a row sums
    dot: bool = False  # gemv, block_m and block_n >= 16: a step's products by tl.dot
    rows_per_program: int = 0  # gemv: rows per program of the row axis (0: all of them)

    def __post_init__(self) -> None:
        for size in (self.block_n, self.block_m):
            if size < 1 or size & (size - 1):
                raise ValueError(f"block_n and block_m must be powers of two, got {self}")
        if not self.gemv and (self.block_n < 16 or self.block_k < 16):
            raise ValueError(f"block_n and block_k must be >= 16, got {self}")
        if self.num_warps < 1 or self.num_stages < 1 or self.splits < 1:
            raise ValueError(f"num_warps, num_stages and splits must be >= 1, got {self}")
        if self.prefetch and (not self.gemv or self.block_m != 1):
            raise ValueError(f"prefetch is for the gemv kernel with block_m 1, got {self}")
        if self.dot and (not self.gemv or self.block_m < 16 or self.block_n < 16):
            raise ValueError(
                f"dot is for the gemv kernel with block_m and block_n >= 16, got {self}")
        if self.rows_per_program < 0 or (self.rows_per_program and not self.gemv):
            raise ValueError(f"rows_per_program is for the gemv kernel, >= 0, got {self}")

    @classmethod
    def parse(cls, text: str) -> LaunchConfig:
        """``BLOCK_NxBLOCK_KxWARPSxSTAGES[xSPLITS]`` (e.g. ``16x128x4x3x3``), or
        ``gBLOCK_NxWARPS[xBLOCK_M][p|d][rROWS]`` for the matrix-vector kernel (e.g.
        ``g2x2x4``; ``p``: prefetch, e.g. ``g2x2p``; ``d``: dot mode, e.g. ``g16x4x16d``;
        ``rROWS``: ``rows_per_program``, e.g. ``g2x2pr1``)."""
        try:
            if text.startswith("g"):
                body, split_rows, per_program = text[1:].partition("r")
                if split_rows and not (per_program.isdigit() and int(per_program) > 0):
                    raise ValueError(f"r wants a row count >= 1, got {per_program!r}")
                suffix = body[-1] if body and body[-1] in "pd" else ""
                fields = [int(v) for v in body[: len(body) - len(suffix)].split("x")]
                if len(fields) not in (2, 3):
                    raise ValueError(f"{len(fields)} fields")
                return cls(block_n=fields[0], num_warps=fields[1], gemv=True,
                           block_m=fields[2] if len(fields) == 3 else 1,
                           prefetch=suffix == "p", dot=suffix == "d",
                           rows_per_program=int(per_program) if per_program else 0)
            fields = [int(v) for v in text.split("x")]
            if len(fields) not in (4, 5):
                raise ValueError(f"{len(fields)} fields")
            return cls(*fields)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"launch config {text!r}: expected BLOCK_NxBLOCK_KxWARPSxSTAGES[xSPLITS] "
                f"(e.g. 16x128x4x3x3) or gBLOCK_NxWARPS[xBLOCK_M][p|d][rROWS] (e.g. g2x2p, "
                f"g16x4x16d, g2x2pr1) ({error})"
            ) from None


GEMV_MAX_TILE = 16384  # products per gemv step: BLOCK_M x weight elements (both tiles)
# dot mode: the weight tile(s) and a step's input tile, elements per thread; 256 16-bit
# elements take 128 of a thread's 255 registers, the others for accumulators and addresses
GEMV_DOT_MAX_PER_THREAD = 256
GEMV_ROWS = 4  # 16-bit forwards of up to this many rows take the gemv kernel by default
GEMV_CONFIG = LaunchConfig(block_n=2, num_warps=2, gemv=True, prefetch=True)


def default_config(dtype: torch.dtype, rows: int) -> LaunchConfig:
    """The launch for ``rows`` rows of ``dtype``. 16-bit rows up to ``GEMV_ROWS`` take the
    matrix-vector kernel (``GEMV_CONFIG``: two output columns per program on two warps,
    the next row's loads in flight while a row sums). On an H200, SmolLM2-135M's layer
    (attention excluded, ``benchmarks/bench_fused_linear.py``, lease Z) then takes 11.8 /
    13.9 / 18.0 / 22.4 us at 1 / 2 / 4 / 6 rows against 22.7-23.0 with the ``tl.dot``
    kernel and 23.8-23.9 unfused; from 8 rows on the ``tl.dot`` kernel is faster, and
    ``GEMV_ROWS`` stops at 4, where the margin is clear. From ``GEMV_ROWS + 1`` to 16 rows
    the ``tl.dot`` kernel takes 256-wide reduction tiles; float32 and 17-32 rows take
    64-wide tiles (register pressure). No split-K by default: an H200 sweep found it no
    faster.

    A row's summation order is the same for every row count that shares a config: 1 to
    ``GEMV_ROWS`` rows, ``GEMV_ROWS + 1`` to 16 (float32: 1 to 16), 17 to 32. So in
    16-bit a token decoded alone and the same token inside a verify batch of
    ``GEMV_ROWS + 1`` to 16 rows can round differently; in float32 they cannot."""
    if dtype == torch.float32 or rows > 16:
        return LaunchConfig(block_k=64)
    forced = _forced_config(os.environ.get("EAGLE_HAL_FUSED_LINEAR_CONFIG", ""))
    if forced:
        return forced
    gemv_rows, gemv = _gemv_default(os.environ.get("EAGLE_HAL_GEMV", ""))
    if rows <= gemv_rows:
        return gemv
    # EAGLE_HAL_FUSED_LINEAR_WIDE=CONFIG: the launch for the rows past the gemv split up
    # to 16 (verify passes), to measure one end to end (benchmarks)
    wide = _forced_config(os.environ.get("EAGLE_HAL_FUSED_LINEAR_WIDE", ""),
                          "EAGLE_HAL_FUSED_LINEAR_WIDE")
    return wide or LaunchConfig(block_k=256, splits=1)


@functools.lru_cache(maxsize=4)
def _gemv_default(text: str) -> tuple[int, LaunchConfig]:
    """(rows up to which 16-bit forwards take the gemv kernel, its config):
    ``GEMV_ROWS`` and ``GEMV_CONFIG``, or ``EAGLE_HAL_GEMV=ROWS:CONFIG`` (e.g.
    ``8:g2x2p``, ``16:g16x8x16d``) to measure another split end to end (benchmarks)."""
    if not text:
        return GEMV_ROWS, GEMV_CONFIG
    try:
        rows, config = text.split(":")
        parsed = LaunchConfig.parse(config)
        if not parsed.gemv or not 0 <= int(rows) <= 16:
            raise ValueError("want rows 0-16 and a gemv config")
        return int(rows), parsed
    except ValueError as error:
        raise ValueError(f"EAGLE_HAL_GEMV={text!r}: expected ROWS:gCONFIG, e.g. 8:g2x2p "
                         f"({error})") from None


@functools.lru_cache(maxsize=4)
def _forced_config(
    text: str, variable: str = "EAGLE_HAL_FUSED_LINEAR_CONFIG"
) -> LaunchConfig | None:
    """``EAGLE_HAL_FUSED_LINEAR_CONFIG=BLOCK_NxBLOCK_KxWARPSxSTAGES[xSPLITS]`` (or
    ``gBLOCK_NxWARPS[xBLOCK_M][p|d][rROWS]``): the launch for 16-bit rows up to 16, to measure a
    configuration end to end (benchmarks). ``variable``: the name to put in an error
    (``EAGLE_HAL_FUSED_LINEAR_WIDE`` parses the same way)."""
    if not text:
        return None
    try:
        return LaunchConfig.parse(text)
    except ValueError as error:
        raise ValueError(f"{variable}: {error}") from None


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


def _config_for(
    x: torch.Tensor, k: int, paired: bool, config: LaunchConfig | None
) -> LaunchConfig:
    """The launch for ``x``'s rows over a reduction of ``k``: ``config``, else the default;
    a gemv config whose tiles would not fit (``GEMV_MAX_TILE``; in dot mode
    ``GEMV_DOT_MAX_PER_THREAD``) becomes the ``tl.dot`` kernel's default. Depends on ``k``
    and the row count's config only, so every row count up to 16 keeps one summation
    order."""
    config = config or default_config(x.dtype, x.shape[0])
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
    config = _config_for(x, weight.shape[1], True, config)
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
    config = _config_for(x, weight.shape[1], True, config)
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
    config = _config_for(x, weight.shape[1], False, config)
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
