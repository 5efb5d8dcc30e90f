"""Launch configurations of the fused small-batch projections (``ops.triton.fused_linear``).

``LaunchConfig`` names a launch: the ``tl.dot`` kernel's tiles and split-K, the
matrix-vector kernel's columns per program, rows per step and modes, or the
weight-streaming small-M kernel's tiles. ``small_m_config`` picks the small-M kernel per
dtype, row count and weight shape where it is the faster one, ``default_config`` the
others per dtype and row count, both under a ``LaunchPolicy``; the default policy is the
shipped choice, another one measures a different choice end to end (benchmarks:
``fused_linear.fused_linear_kernels(policy)`` in a model's kernels).
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = [
    "DEFAULT_POLICY",
    "GEMV_CONFIG",
    "GEMV_DOT_MAX_PER_THREAD",
    "GEMV_MAX_TILE",
    "GEMV_ROWS",
    "LaunchConfig",
    "LaunchPolicy",
    "SMALL_M_BLOCK_K",
    "SMALL_M_MAX_WEIGHT",
    "SMALL_M_ROWS",
    "default_config",
    "small_m_config",
    "small_m_launch",
]


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
    depend on its group, so this changes the time, never the bits.

    ``small_m``: the weight-streaming kernel (``small_m_kernel``) instead: program
    ``(j, s)`` takes ``block_n`` output columns and the ``s``-th ``block_k`` features, one
    weight tile loaded once for all the rows (up to 64, padded to 16, 32 or 64); the
    reduction takes ``ceil(K / block_k)`` splits (``splits`` and ``num_stages`` unused)."""

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
    small_m: bool = False  # the weight-streaming kernel, one block_k split per program

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
        if self.small_m and (self.gemv or self.block_k & (self.block_k - 1)):
            raise ValueError(f"small_m takes a power-of-two block_k, not gemv, got {self}")

    @classmethod
    def parse(cls, text: str) -> LaunchConfig:
        """``BLOCK_NxBLOCK_KxWARPSxSTAGES[xSPLITS]`` (e.g. ``16x128x4x3x3``), or
        ``gBLOCK_NxWARPS[xBLOCK_M][p|d][rROWS]`` for the matrix-vector kernel (e.g.
        ``g2x2x4``; ``p``: prefetch, e.g. ``g2x2p``; ``d``: dot mode, e.g. ``g16x4x16d``;
        ``rROWS``: ``rows_per_program``, e.g. ``g2x2pr1``), or ``sBLOCK_NxBLOCK_KxWARPS``
        for the small-M kernel (e.g. ``s16x128x4``)."""
        try:
            if text.startswith("s"):
                fields = [int(v) for v in text[1:].split("x")]
                if len(fields) != 3:
                    raise ValueError(f"{len(fields)} fields")
                return cls(block_n=fields[0], block_k=fields[1], num_warps=fields[2],
                           small_m=True)
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
                f"(e.g. 16x128x4x3x3), gBLOCK_NxWARPS[xBLOCK_M][p|d][rROWS] (e.g. g2x2p, "
                f"g16x4x16d, g2x2pr1) or sBLOCK_NxBLOCK_KxWARPS (e.g. s16x128x4) ({error})"
            ) from None


GEMV_MAX_TILE = 16384  # products per gemv step: BLOCK_M x weight elements (both tiles)
# dot mode: the weight tile(s) and a step's input tile, elements per thread; 256 16-bit
# elements take 128 of a thread's 255 registers, the others for accumulators and addresses
GEMV_DOT_MAX_PER_THREAD = 256
GEMV_ROWS = 4  # 16-bit forwards of up to this many rows take the gemv kernel by default
GEMV_CONFIG = LaunchConfig(block_n=2, num_warps=2, gemv=True, prefetch=True)

# The weight-streaming small-M kernel's dispatch, as data. It takes 16-bit forwards of
# SMALL_M_ROWS rows (from past the policy's gemv split) whose weight has at most
# SMALL_M_MAX_WEIGHT elements; larger weights (an 8B model's layers: 16.8M elements for its
# O projection, 117M for gate/up) keep the tl.dot kernel, and forwards past the fused
# path's row limit take the GEMMs. The values are what ``python benchmarks/bench_small_m.py``
# (us per projection shape x rows: small-M, the fused kernels' default, cuBLAS) is run to
# set; where its table puts cuBLAS or the tl.dot kernel ahead, move them.
SMALL_M_ROWS = (2, 64)  # first and last row count
SMALL_M_MAX_WEIGHT = 8 * 2**20  # weight elements (both tiles of a paired projection)
# block_k per padded row block: the x tile ([BLOCK_M, block_k]) and the float32 partials
# (2 * BLOCK_M / block_k of the weight's bytes) grow with the rows
SMALL_M_BLOCK_K = {16: 256, 32: 256, 64: 128}
SMALL_M_BLOCK_N = (16, 32)  # columns per program: plain, paired (qkv, gate/up)
SMALL_M_WARPS = 4


@dataclasses.dataclass(frozen=True, slots=True)
class LaunchPolicy:
    """Which launch 16-bit forwards of up to 16 rows take (float32 and 17-32 rows always
    take ``LaunchConfig(block_k=64)``). The defaults are the shipped choice
    (``default_config``); other values measure another choice end to end.

    ``forced``: one launch for every 16-bit row count up to 16 (the fields below unused).
    ``gemv_rows``: rows (0-16) up to which the matrix-vector launch ``gemv`` is taken.
    ``wide``: the launch past ``gemv_rows`` up to 16 rows (verify passes); ``None``: the
    ``tl.dot`` kernel with 256-wide reduction tiles.
    ``small_m``: whether the weight-streaming kernel takes the rows and shapes
    ``small_m_config`` gives it (``forced`` and ``wide`` take precedence)."""

    forced: LaunchConfig | None = None
    gemv_rows: int = GEMV_ROWS
    gemv: LaunchConfig = GEMV_CONFIG
    wide: LaunchConfig | None = None
    small_m: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.gemv_rows <= 16:
            raise ValueError(f"gemv_rows must be 0-16, got {self.gemv_rows}")
        if not self.gemv.gemv:
            raise ValueError(f"gemv must be a gemv launch (LaunchConfig(gemv=True)), got "
                             f"{self.gemv}")

    @classmethod
    def with_gemv_split(cls, text: str) -> LaunchPolicy:
        """The default policy with its gemv split spelt ``ROWS:gCONFIG`` (e.g. ``8:g2x2p``,
        ``16:g16x8x16d``; see ``LaunchConfig.parse``), as a benchmark's flag gives it."""
        try:
            rows, config = text.split(":")
            return cls(gemv_rows=int(rows), gemv=LaunchConfig.parse(config))
        except ValueError as error:
            raise ValueError(f"gemv split {text!r}: expected ROWS:gCONFIG with ROWS 0-16, "
                             f"e.g. 8:g2x2p ({error})") from None


DEFAULT_POLICY = LaunchPolicy()


def default_config(
    dtype: torch.dtype, rows: int, policy: LaunchPolicy = DEFAULT_POLICY
) -> LaunchConfig:
    """The launch for ``rows`` rows of ``dtype`` under ``policy``. By default 16-bit rows
    up to ``GEMV_ROWS`` take the matrix-vector kernel (``GEMV_CONFIG``: two output columns
    per program on two warps, the next row's loads in flight while a row sums): for
    SmolLM2-135M's layer on an H200 (attention excluded, ``benchmarks/bench_fused_linear.py
    --rows 1,2,4,6,8``) it takes 11.8 / 13.9 / 18.0 / 22.4 us at 1 / 2 / 4 / 6 rows against
    22.7-23.0 with the ``tl.dot`` kernel and 23.8-23.9 unfused; from 8 rows on the
    ``tl.dot`` kernel is faster, and ``GEMV_ROWS`` stops at 4, where the margin is clear.
    From ``GEMV_ROWS + 1`` to 16 rows the ``tl.dot`` kernel takes 256-wide reduction tiles;
    float32 and 17-32 rows take 64-wide tiles (register pressure). No split-K by default:
    the sweep of ``benchmarks/bench_fused_linear.py`` (its default ``--configs``) finds it
    no faster on an H200.

    A row's summation order is the same for every row count that shares a config: 1 to
    ``GEMV_ROWS`` rows, ``GEMV_ROWS + 1`` to 16 (float32: 1 to 16), 17 to 32. So in
    16-bit a token decoded alone and the same token inside a verify batch of
    ``GEMV_ROWS + 1`` to 16 rows can round differently; in float32 they cannot."""
    if dtype == torch.float32 or rows > 16:
        return LaunchConfig(block_k=64)
    if policy.forced is not None:
        return policy.forced
    if rows <= policy.gemv_rows:
        return policy.gemv
    return policy.wide or LaunchConfig(block_k=256, splits=1)


def small_m_config(
    dtype: torch.dtype, rows: int, out_rows: int, in_features: int, paired: bool,
    policy: LaunchPolicy = DEFAULT_POLICY,
) -> LaunchConfig | None:
    """The small-M kernel's launch for ``rows`` rows of ``dtype`` through a weight of
    ``out_rows`` x ``in_features`` elements (``paired``: gate/up or Q/K/V with rotary, two
    tiles a program), or ``None`` where ``default_config``'s launch is taken: float32,
    row counts outside ``SMALL_M_ROWS`` or at most the policy's ``gemv_rows``, weights over
    ``SMALL_M_MAX_WEIGHT``, and policies that force a launch, set a ``wide`` one or turn
    ``small_m`` off. A row's summation order follows ``in_features`` and the padded row
    block (16, 32 or 64) only."""
    first, last = SMALL_M_ROWS
    if (dtype == torch.float32 or not policy.small_m or policy.forced is not None
            or policy.wide is not None or rows < max(first, policy.gemv_rows + 1)
            or rows > last or out_rows * in_features > SMALL_M_MAX_WEIGHT):
        return None
    return small_m_launch(rows, in_features, paired)


def small_m_launch(rows: int, in_features: int, paired: bool) -> LaunchConfig:
    """The small-M kernel's tiles for ``rows`` (1-64) over ``in_features``: the data
    above, with ``block_k`` no wider than the reduction needs."""
    block_m = max(16, 1 << (rows - 1).bit_length())
    block_k = min(SMALL_M_BLOCK_K[block_m], max(16, 1 << (in_features - 1).bit_length()))
    return LaunchConfig(block_n=SMALL_M_BLOCK_N[1 if paired else 0], block_k=block_k,
                        num_warps=SMALL_M_WARPS, small_m=True)
