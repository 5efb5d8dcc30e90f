"""The matrix-vector kernel (``ops/triton/fused_gemv_kernel``) behind the fused projections,
row by row and in dot mode, and when a projection leaves it for the ``tl.dot`` kernel.

Oracle: the norm, a float64 matmul rounded once and the epilogue, from the pure-torch
reference kernels (``ops/reference_model``), the way an unfused decoder layer runs them;
a row alone against the same row in a batch, bit for bit. Without an accelerator the
kernels run under TRITON_INTERPRET=1 on CPU tensors; float32 agrees to summation order,
bfloat16 to an ulp or two (the interpreter rounds float32 -> bfloat16 toward zero). The
cases and oracles are in ``fused_linear_cases``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from eagle_hal.ops.triton import fused_linear as fused  # noqa: E402
from fused_linear_cases import (  # noqa: E402
    DTYPES,
    PROJECTIONS,
    ROW_INPUTS,
    as_tuple,
    assert_close,
    assert_same_rows,
    gate_up_case,
    linear_case,
)

# The matrix-vector kernel (LaunchConfig.gemv): the whole reduction in one tile, the rows
# one after the other. K = 100 features pad to a 128-lane tile.
GEMV_CASES = [
    ("qkv_rotary", 1, (True, True, False)),  # residual, norm, bias
    ("qkv_rotary", 3, (False, True, True)),
    ("qkv_rotary", 16, (True, False, False)),
    ("gate_up_silu", 1, (True, True)),  # residual, norm
    ("gate_up_silu", 5, (False, True)),
    ("gate_up_silu", 16, (True, False)),
    ("linear", 1, (False, False)),  # bias, add
    ("linear", 3, (True, False)),
    ("linear", 16, (True, True)),
]


@pytest.mark.parametrize("block_n,block_m,prefetch", [
    (1, 1, False), (4, 1, False), (16, 1, False), (2, 4, False), (4, 2, False),
    (2, 1, True), (16, 1, True),
])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("projection,rows,flags", GEMV_CASES)
def test_gemv_equals_float64_oracle(projection, rows, flags, dtype, block_n, block_m,
                                    prefetch):
    """Each epilogue as a matrix-vector product equals norm + float64 matmul + epilogue,
    for tiles narrower than the head's half (rotary), as wide, and wider than the output,
    a row at a time or several (the last step partly padding); the stream (written by
    program 0) equals the sum."""
    build, call, oracle = PROJECTIONS[projection]
    case = build(rows, dtype, *flags)
    config = fused.LaunchConfig(block_n=block_n, block_m=block_m, gemv=True,
                                prefetch=prefetch)

    actual = as_tuple(call(**case, config=config))

    for got, expected in zip(actual, as_tuple(oracle(case)), strict=True):
        assert_close(got, expected.reshape(got.shape))


@pytest.mark.parametrize("block_m,prefetch", [(1, False), (4, False), (1, True)])
@pytest.mark.parametrize("projection,flags", [
    ("qkv_rotary", (True, True, True)), ("gate_up_silu", (True, True)),
    ("linear", (True, True)),
])
def test_gemv_row_alone_equals_row_in_a_batch(projection, flags, block_m, prefetch):
    """A row's reduction does not depend on the other rows: alone and in a batch of 16 its
    outputs are bit for bit the same."""
    build, call, _ = PROJECTIONS[projection]
    batch = build(16, torch.bfloat16, *flags)
    alone = {
        name: value[:1] if name in ROW_INPUTS and value is not None else value
        for name, value in batch.items()
    }
    config = fused.LaunchConfig(block_n=4, block_m=block_m, gemv=True, prefetch=prefetch)

    batched = as_tuple(call(**batch, config=config))
    single = as_tuple(call(**alone, config=config))

    for one, many in zip(single, batched, strict=True):
        assert torch.equal(one[0], many[0])


@pytest.mark.parametrize("per_program,block_m,prefetch", [
    (1, 1, False), (1, 1, True), (3, 1, True), (2, 2, False), (5, 4, False),
])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("projection,rows,flags", [
    ("qkv_rotary", 7, (True, True, True)), ("gate_up_silu", 16, (True, True)),
    ("linear", 6, (True, True)),
])
def test_gemv_rows_dealt_to_programs_equal_float64_oracle(projection, rows, flags, dtype,
                                                          per_program, block_m, prefetch):
    """Rows dealt over the grid's second axis (``rows_per_program``; the last group partly
    empty where it does not divide the rows) give every row the oracle's outputs, and the
    stream (written by each group's program 0) equals the sum; and the bits are those of
    one program taking every row, since a row's sum does not depend on its group."""
    build, call, oracle = PROJECTIONS[projection]
    case = build(rows, dtype, *flags)
    config = fused.LaunchConfig(block_n=4, block_m=block_m, gemv=True, prefetch=prefetch,
                                rows_per_program=per_program)
    together = fused.LaunchConfig(block_n=4, block_m=block_m, gemv=True, prefetch=prefetch)

    actual = as_tuple(call(**case, config=config))

    for got, expected in zip(actual, as_tuple(oracle(case)), strict=True):
        assert_close(got, expected.reshape(got.shape))
    for got, one_program in zip(actual, as_tuple(call(**case, config=together)), strict=True):
        assert torch.equal(got, one_program)


def test_gemv_dot_rows_dealt_to_programs_equal_float64_oracle():
    """Dot mode with 16-row groups: 20 rows as a full group and a padded one."""
    build, call, oracle = PROJECTIONS["gate_up_silu"]
    case = build(20, torch.bfloat16, True, True)
    config = fused.LaunchConfig(block_n=16, num_warps=4, block_m=16, gemv=True, dot=True,
                                rows_per_program=16)

    actual = as_tuple(call(**case, config=config))

    for got, expected in zip(actual, as_tuple(oracle(case)), strict=True):
        assert_close(got, expected.reshape(got.shape))


def gemv_launches(monkeypatch) -> list[bool]:
    """Spy on the gemv kernel: one entry per launch from now on, whether in dot mode."""
    launches = []
    real = fused.fused_gemv_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches.append(kwargs["DOT"])
                return real[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(fused, "fused_gemv_kernel", Spy())
    return launches


def test_gemv_too_wide_for_a_tile_takes_the_dot_kernel(monkeypatch):
    """A weight tile over GEMV_MAX_TILE elements takes the tl.dot kernel: same results as
    that kernel's default, bit for bit."""
    case = gate_up_case(3, torch.float32, True, True)
    dot = fused.gate_up_silu(**case, config=fused.LaunchConfig(block_k=64))
    monkeypatch.setattr(fused, "GEMV_MAX_TILE", 64)
    launched = gemv_launches(monkeypatch)

    wide = fused.gate_up_silu(**case, config=fused.LaunchConfig(block_n=4, gemv=True))

    assert not launched
    for a, b in zip(dot, wide, strict=True):
        assert torch.equal(a, b)


# Dot mode (LaunchConfig.dot): the gemv kernel's one wave of weight loads, then 16 or 32
# rows a step by tl.dot. Each case has its own reduction length, none a power of two (the
# tile pads K to the next), and head_dim 40 gives rotary halves of 20: a 16-wide tile and
# a partial one.
DOT_CASES = [  # projection, flags, sizes
    ("qkv_rotary", (True, True, False), dict(hidden=100)),  # residual, norm, bias
    ("qkv_rotary", (False, True, True), dict(hidden=37, head_dim=40)),
    ("qkv_rotary", (True, False, True), dict(hidden=50, head_dim=40)),
    ("qkv_rotary", (False, False, False), dict(hidden=200)),
    ("gate_up_silu", (True, True), dict(hidden=37)),  # residual, norm
    ("gate_up_silu", (False, True), dict(hidden=100)),
    ("gate_up_silu", (True, False), dict(hidden=50)),
    ("gate_up_silu", (False, False), dict(hidden=200, intermediate=24)),
    ("linear", (False, False), dict(hidden=37)),  # bias, add
    ("linear", (True, False), dict(hidden=50)),
    ("linear", (False, True), dict(hidden=100)),
    ("linear", (True, True), dict(hidden=200, out_features=40)),
]
DOT_ROWS = [  # rows, config: every step padded to block_m rows
    (1, "g16x4x16d"), (5, "g16x4x16d"), (16, "g16x4x16d"), (17, "g16x4x16d"),
    (32, "g16x4x16d"), (5, "g32x8x32d"), (32, "g32x8x32d"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,config", DOT_ROWS)
@pytest.mark.parametrize("projection,flags,sizes", DOT_CASES)
def test_gemv_dot_equals_float64_oracle(projection, flags, sizes, rows, config, dtype,
                                        monkeypatch):
    """Each epilogue in dot mode equals norm + float64 matmul + epilogue, for one step of
    rows or two, the last partly padding; the stream equals the sum."""
    build, call, oracle = PROJECTIONS[projection]
    case = build(rows, dtype, *flags, **sizes)
    launches = gemv_launches(monkeypatch)

    actual = as_tuple(call(**case, config=fused.LaunchConfig.parse(config)))

    assert launches == [True]
    for got, expected in zip(actual, as_tuple(oracle(case)), strict=True):
        assert_close(got, expected.reshape(got.shape))


@pytest.mark.parametrize("config", ["g16x4x16d", "g32x8x32d"])
@pytest.mark.parametrize("batch", [16, 32])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("projection,flags,sizes", [
    ("qkv_rotary", (True, True, True), dict(hidden=100, head_dim=40)),
    ("gate_up_silu", (True, True), dict(hidden=50)),
    ("linear", (True, True), dict(hidden=37)),
])
def test_gemv_dot_row_alone_equals_row_in_a_batch(projection, flags, sizes, dtype, batch,
                                                  config):
    """In dot mode a row's outputs are bit for bit the same alone as anywhere in a batch:
    first, in the middle, last, in the first step of rows or a later one."""
    build, call, _ = PROJECTIONS[projection]
    case = build(batch, dtype, *flags, **sizes)
    config = fused.LaunchConfig.parse(config)

    batched = as_tuple(call(**case, config=config))

    for row in (0, 9, batch - 1):
        alone = {
            name: value[row : row + 1] if name in ROW_INPUTS and value is not None else value
            for name, value in case.items()
        }
        single = as_tuple(call(**alone, config=config))
        for one, many in zip(single, batched, strict=True):
            assert_same_rows(one[0], many[row])


SMOLLM2 = {  # SmolLM2-135M's projections: hidden 576, 9/3 heads x 64, intermediate 1536
    "qkv_rotary": ("qkv_rotary", (True, True, False), dict(hidden=576, heads=9, kv_heads=3,
                                                           head_dim=64)),
    "o": ("linear", (False, False), dict(hidden=576, out_features=576)),
    "gate_up_silu": ("gate_up_silu", (True, True), dict(hidden=576, intermediate=1536)),
    "down": ("linear", (False, True), dict(hidden=1536, out_features=576)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", SMOLLM2)
def test_gemv_dot_at_smollm2_size(name, dtype, monkeypatch):
    """At the real model's sizes (K 576 and 1536 pad to 1024 and 2048) 8 warps keep every
    projection in dot mode; it equals the oracle, and a row alone equals the row in the
    batch."""
    projection, flags, sizes = SMOLLM2[name]
    build, call, oracle = PROJECTIONS[projection]
    case = build(6, dtype, *flags, **sizes)
    config = fused.LaunchConfig.parse("g16x8x16d")
    launches = gemv_launches(monkeypatch)

    actual = as_tuple(call(**case, config=config))
    alone = as_tuple(call(**{
        name: value[5:] if name in ROW_INPUTS and value is not None else value
        for name, value in case.items()
    }, config=config))

    # in float32 all but O exceed the dot budget (on the H200 they asked for more shared
    # memory than it has) and take the tl.dot kernel
    assert launches == ([] if dtype == torch.float32 and name != "o" else [True, True])
    for got, expected in zip(actual, as_tuple(oracle(case)), strict=True):
        expected = expected.reshape(got.shape)
        if dtype == torch.float32:
            assert_close(got, expected)
        else:  # over K 576 the 16-bit stream and normed rows (rounded toward zero when
            # interpreted) move a sum that cancels by a few ulps, in any of the kernels
            torch.testing.assert_close(got.float(), expected.float(), atol=5e-2, rtol=2**-4)
    for one, many in zip(alone, actual, strict=True):
        assert torch.equal(one[0], many[5])


def test_gemv_dot_over_its_register_budget_takes_the_dot_kernel(monkeypatch):
    """Where the weight tile and a step's rows exceed GEMV_DOT_MAX_PER_THREAD elements per
    thread (SmolLM2's down projection on 4 warps: (16 + 16) x 2048 / 128 = 512) the
    projection takes the tl.dot kernel's default, bit for bit; the O projection (K 576:
    256 per thread) stays in dot mode."""
    projection, flags, sizes = SMOLLM2["down"]
    case = linear_case(3, torch.bfloat16, *flags, **sizes)
    expected = fused.linear(**case, config=fused.LaunchConfig(block_k=256))
    launches = gemv_launches(monkeypatch)

    down = fused.linear(**case, config=fused.LaunchConfig.parse("g16x4x16d"))
    fused.linear(**linear_case(3, torch.bfloat16, *SMOLLM2["o"][1], **SMOLLM2["o"][2]),
                 config=fused.LaunchConfig.parse("g16x4x16d"))

    assert launches == [True]  # the O projection's only
    assert torch.equal(down, expected)
