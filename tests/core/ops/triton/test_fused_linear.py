"""The fused small-batch projections (``ops/triton/fused_linear``) equal the unfused ops.

Oracle: the pure-torch reference kernels (``ops/reference_model``) around ``F.linear``, the
way an unfused decoder layer runs them. Without an accelerator the kernels run under
TRITON_INTERPRET=1 on CPU tensors; float32 agrees to summation order, bfloat16 to an ulp or
two (the interpreter rounds float32 -> bfloat16 toward zero).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from eagle_hal.ops import reference_model as reference  # noqa: E402
from eagle_hal.ops.triton import fused_linear as fused  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
if not INTERPRETED and not torch.accelerator.is_available():
    pytest.skip("Triton kernels need an accelerator or TRITON_INTERPRET=1",
                allow_module_level=True)
DEVICE = torch.device("cpu") if INTERPRETED else torch.accelerator.current_accelerator()
DTYPES = [torch.float32, torch.bfloat16]
EPS = 1e-6


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
    else:
        torch.testing.assert_close(actual.float(), expected.float(), atol=3e-2, rtol=2**-5)


def randn(*shape: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(shape, generator=generator)).to(device=DEVICE, dtype=dtype)


def stream_and_input(x, residual, norm_weight):
    """The reference's stream (x + residual) and the normed projection input."""
    if residual is None:
        total = x
        normed = reference.rms_norm(x, norm_weight, EPS) if norm_weight is not None else x
    elif norm_weight is not None:
        normed, total = reference.add_rms_norm(x, residual, norm_weight, EPS)
    else:
        total = x + residual
        normed = total
    return total, normed


def rotary_tables(rows: int, head_dim: int, dtype: torch.dtype, seed: int):
    generator = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 4096, (rows,), generator=generator).float()
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = positions[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(DEVICE, dtype), angles.sin().to(DEVICE, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "rows,hidden,heads,kv_heads,head_dim,has_residual,has_norm,has_bias",
    [
        (1, 96, 3, 1, 32, True, True, False),  # SmolLM2's 3:1 grouping, a decode step
        (5, 200, 2, 2, 64, False, True, True),  # first layer (no residual yet), Q/K/V bias
        (16, 64, 4, 2, 16, True, True, False),  # a 16-node verify tree
        (21, 48, 2, 1, 40, False, False, True),  # a draft layer: no norm; 32-row tiles
    ],
)
def test_qkv_rotary_equals_norm_linear_rotary(
    dtype, rows, hidden, heads, kv_heads, head_dim, has_residual, has_norm, has_bias
):
    """[residual add +] RMSNorm + QKV + rotary equal the unfused ops; the inputs are intact
    and the stream is returned (``x`` itself when there is no residual)."""
    x = randn(rows, hidden, dtype=dtype, seed=1)
    residual = randn(rows, hidden, dtype=dtype, seed=2) if has_residual else None
    norm_weight = 1 + 0.1 * randn(hidden, dtype=dtype, seed=3) if has_norm else None
    width = (heads + 2 * kv_heads) * head_dim
    weight = randn(width, hidden, dtype=dtype, seed=4, scale=hidden**-0.5)
    bias = randn(width, dtype=dtype, seed=5, scale=0.1) if has_bias else None
    cos, sin = rotary_tables(rows, head_dim, dtype, seed=6)
    before = x.clone()

    q, k, v, stream = fused.qkv_rotary(
        x, residual, norm_weight, EPS, weight, bias, cos, sin, heads, kv_heads
    )

    total, normed = stream_and_input(x, residual, norm_weight)
    qkv = F.linear(normed, weight, bias)
    eq, ek, ev = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
    eq, ek = reference.rotary(
        eq.reshape(rows, heads, head_dim), ek.reshape(rows, kv_heads, head_dim), cos, sin
    )
    assert_close(q, eq)
    assert_close(k, ek)
    assert_close(v, ev.reshape(rows, kv_heads, head_dim))
    assert_close(stream, total)
    assert torch.equal(x, before)
    if residual is None:
        assert stream is x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden,intermediate,has_residual,has_norm", [
    (1, 96, 160, True, True), (7, 37, 50, True, True), (32, 64, 48, True, True),
    (3, 40, 24, False, True), (2, 40, 24, False, False),
])
def test_gate_up_silu_equals_add_norm_linear_silu(
    dtype, rows, hidden, intermediate, has_residual, has_norm
):
    """[residual add +] [RMSNorm +] gate/up + silu(gate) * up equal the unfused ops."""
    x = randn(rows, hidden, dtype=dtype, seed=7)
    residual = randn(rows, hidden, dtype=dtype, seed=8) if has_residual else None
    norm_weight = 1 + 0.1 * randn(hidden, dtype=dtype, seed=9) if has_norm else None
    weight = randn(2 * intermediate, hidden, dtype=dtype, seed=10, scale=hidden**-0.5)

    activated, stream = fused.gate_up_silu(x, residual, norm_weight, EPS, weight)

    total, normed = stream_and_input(x, residual, norm_weight)
    assert_close(activated, reference.silu_mul(F.linear(normed, weight)))
    assert_close(stream, total)
    if residual is None:
        assert stream is x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("has_bias,has_add", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("rows,in_features,out_features", [(1, 160, 96), (9, 50, 37)])
def test_linear_equals_f_linear(dtype, has_bias, has_add, rows, in_features, out_features):
    """x @ W.T [+ bias], rounded, [+ add], rounded: F.linear then the add."""
    x = randn(rows, in_features, dtype=dtype, seed=11)
    weight = randn(out_features, in_features, dtype=dtype, seed=12, scale=in_features**-0.5)
    bias = randn(out_features, dtype=dtype, seed=13) if has_bias else None
    add = randn(rows, out_features, dtype=dtype, seed=14) if has_add else None
    expected = F.linear(x, weight, bias)
    if add is not None:
        expected = add + expected
    assert_close(fused.linear(x, weight, bias, add), expected)


def test_strided_input_rows():
    """Input rows may be a strided view (e.g. attention output columns)."""
    base = randn(3, 80, dtype=torch.float32, seed=15)
    x = base[:, 8:72]  # row stride 80
    weight = randn(24, 64, dtype=torch.float32, seed=16)
    assert_close(fused.linear(x, weight), F.linear(x, weight))


def test_a_row_alone_equals_the_row_in_a_batch():
    """No split over the reduction and one tile config up to 16 rows: a token's projection
    is bit for bit the same alone as inside a verify batch."""
    x = randn(16, 96, dtype=torch.float32, seed=17)
    weight = randn(64, 96, dtype=torch.float32, seed=18)
    batched = fused.linear(x, weight)
    for row in (0, 7, 15):
        assert torch.equal(fused.linear(x[row : row + 1], weight)[0], batched[row])


def test_bad_inputs_are_refused():
    x = randn(2, 32, dtype=torch.float32, seed=19)
    with pytest.raises(ValueError, match="at most"):
        fused.linear(randn(fused.MAX_TOKENS + 1, 32, dtype=torch.float32, seed=20),
                     randn(16, 32, dtype=torch.float32, seed=21))
    with pytest.raises(ValueError, match="input features"):
        fused.linear(x, randn(16, 31, dtype=torch.float32, seed=22))
    with pytest.raises(ValueError, match="heads"):
        cos, sin = rotary_tables(2, 16, torch.float32, seed=23)
        fused.qkv_rotary(x, None, None, EPS, randn(70, 32, dtype=torch.float32, seed=24), None,
                         cos, sin, 2, 1)
    with pytest.raises(ValueError, match="residual"):
        fused.gate_up_silu(x, randn(3, 32, dtype=torch.float32, seed=25), None, EPS,
                           randn(32, 32, dtype=torch.float32, seed=26))


# Split-K. The reduction is K = 100 features in 16-wide blocks: 7 blocks, dealt 4+3,
# 3+3+1 and 2+2+2+1 by 2, 3 and 4 splits, the last block a partial one.
SPLIT_K_FEATURES = 100


def split_config(splits: int) -> fused.LaunchConfig:
    return fused.LaunchConfig(block_k=16, splits=splits)


def exact_linear(x, weight, bias=None):
    """x @ W.T [+ bias] summed in float64, rounded once to x's dtype (a GEMM's rounding)."""
    bias = bias.double() if bias is not None else None
    return F.linear(x.double(), weight.double(), bias).to(x.dtype)


def qkv_case(rows, dtype, has_residual, has_norm, has_bias, heads=2, kv_heads=1, head_dim=32,
             hidden=SPLIT_K_FEATURES):
    width = (heads + 2 * kv_heads) * head_dim
    cos, sin = rotary_tables(rows, head_dim, dtype, seed=36)
    return dict(
        x=randn(rows, hidden, dtype=dtype, seed=31),
        residual=randn(rows, hidden, dtype=dtype, seed=32) if has_residual else None,
        norm_weight=1 + 0.1 * randn(hidden, dtype=dtype, seed=33) if has_norm else None,
        eps=EPS, weight=randn(width, hidden, dtype=dtype, seed=34, scale=hidden**-0.5),
        bias=randn(width, dtype=dtype, seed=35, scale=0.1) if has_bias else None,
        cos=cos, sin=sin, num_heads=heads, num_kv_heads=kv_heads,
    )


def qkv_oracle(case):
    total, normed = stream_and_input(case["x"], case["residual"], case["norm_weight"])
    rows, heads, kv_heads = case["x"].shape[0], case["num_heads"], case["num_kv_heads"]
    head_dim = case["cos"].shape[1]
    qkv = exact_linear(normed, case["weight"], case["bias"]).view(rows, -1, head_dim)
    q, k = reference.rotary(qkv[:, :heads], qkv[:, heads : heads + kv_heads], case["cos"],
                            case["sin"])
    return q, k, qkv[:, heads + kv_heads :], total


def gate_up_case(rows, dtype, has_residual, has_norm, intermediate=40, hidden=SPLIT_K_FEATURES):
    return dict(
        x=randn(rows, hidden, dtype=dtype, seed=41),
        residual=randn(rows, hidden, dtype=dtype, seed=42) if has_residual else None,
        norm_weight=1 + 0.1 * randn(hidden, dtype=dtype, seed=43) if has_norm else None,
        eps=EPS, weight=randn(2 * intermediate, hidden, dtype=dtype, seed=44,
                              scale=hidden**-0.5),
    )


def gate_up_oracle(case):
    total, normed = stream_and_input(case["x"], case["residual"], case["norm_weight"])
    return reference.silu_mul(exact_linear(normed, case["weight"])), total


def linear_case(rows, dtype, has_bias, has_add, out_features=37, hidden=SPLIT_K_FEATURES):
    return dict(
        x=randn(rows, hidden, dtype=dtype, seed=51),
        weight=randn(out_features, hidden, dtype=dtype, seed=52, scale=hidden**-0.5),
        bias=randn(out_features, dtype=dtype, seed=53) if has_bias else None,
        add=randn(rows, out_features, dtype=dtype, seed=54) if has_add else None,
    )


def linear_oracle(case):
    y = exact_linear(case["x"], case["weight"], case["bias"])
    return y if case["add"] is None else case["add"] + y


PROJECTIONS = {  # name -> (case builder, fused call, oracle)
    "qkv_rotary": (qkv_case, fused.qkv_rotary, qkv_oracle),
    "gate_up_silu": (gate_up_case, fused.gate_up_silu, gate_up_oracle),
    "linear": (linear_case, fused.linear, linear_oracle),
}


ROW_INPUTS = ("x", "residual", "add", "cos", "sin")


def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("splits", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("projection,rows,flags", [
    ("qkv_rotary", 1, (True, True, False)),  # residual, norm, bias
    ("qkv_rotary", 3, (False, True, True)),
    ("qkv_rotary", 16, (True, False, False)),
    ("qkv_rotary", 32, (False, False, True)),
    ("gate_up_silu", 1, (True, True)),  # residual, norm
    ("gate_up_silu", 3, (False, True)),
    ("gate_up_silu", 16, (True, False)),
    ("gate_up_silu", 32, (False, False)),
    ("linear", 1, (False, False)),  # bias, add
    ("linear", 3, (True, False)),
    ("linear", 16, (False, True)),
    ("linear", 32, (True, True)),
])
def test_split_k_equals_float64_oracle(projection, rows, flags, dtype, splits):
    """Each epilogue, split over K, equals norm + float64 matmul + epilogue; the stream
    (x + residual, written once by the tile-0 programs) equals the sum."""
    build, call, oracle = PROJECTIONS[projection]
    case = build(rows, dtype, *flags)

    actual = as_tuple(call(**case, config=split_config(splits)))

    for got, expected in zip(actual, as_tuple(oracle(case)), strict=True):
        assert_close(got, expected.reshape(got.shape))


@pytest.mark.parametrize("splits", [1, 3, 4])
@pytest.mark.parametrize("projection,flags", [
    ("qkv_rotary", (True, True, True)), ("gate_up_silu", (True, True)),
    ("linear", (True, True)),
])
def test_split_k_row_alone_equals_row_in_a_batch(projection, flags, splits):
    """Split boundaries and the partials' order do not depend on the rows: a token's
    outputs are bit for bit the same alone as in a batch of 16."""
    build, call, _ = PROJECTIONS[projection]
    batch = build(16, torch.bfloat16, *flags)
    alone = {  # the first row of each per-row input
        name: value[:1] if name in ROW_INPUTS and value is not None else value
        for name, value in batch.items()
    }
    config = split_config(splits)

    batched = as_tuple(call(**batch, config=config))
    single = as_tuple(call(**alone, config=config))

    for one, many in zip(single, batched, strict=True):
        assert torch.equal(one[0], many[0])


@pytest.mark.parametrize("splits", [2, 4])
def test_split_k_launches_leave_the_counters_at_zero(splits):
    """The last program of a tile resets its arrival counter: launch after launch (of
    other grids in between) gives the same outputs, and the counters end at 0."""
    case = gate_up_case(3, torch.float32, True, True)
    other = linear_case(5, torch.float32, True, False, out_features=150)
    config = split_config(splits)

    first = fused.gate_up_silu(**case, config=config)
    fused.linear(**other, config=config)
    second = fused.gate_up_silu(**case, config=config)
    third = fused.gate_up_silu(**case, config=config)

    for outputs in (second, third):
        for a, b in zip(first, outputs, strict=True):
            assert torch.equal(a, b)
    assert_close(first[0], gate_up_oracle(case)[0])
    assert not fused._ARRIVALS[case["x"].device].any()


def test_launch_config_is_validated():
    with pytest.raises(ValueError, match="splits"):
        fused.LaunchConfig(splits=0)
    with pytest.raises(ValueError, match="block_k"):
        fused.LaunchConfig(block_k=8)


def test_a_forced_launch_config_is_parsed_or_refused(monkeypatch):
    """EAGLE_HAL_FUSED_LINEAR_CONFIG picks the 16-bit launch; a malformed one says how."""
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig, default_config

    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "16x128x4x3x3")
    assert default_config(torch.bfloat16, 1) == LaunchConfig(16, 128, 4, 3, 3)
    assert default_config(torch.float32, 1) == LaunchConfig(block_k=64)  # not forced
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "16x128x2x2")
    assert default_config(torch.float16, 4) == LaunchConfig(16, 128, 2, 2)
    for bad in ("16x128x0x3", "sixteen", "1x2x3x4x5x6"):
        monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", bad)
        with pytest.raises(ValueError, match="EAGLE_HAL_FUSED_LINEAR_CONFIG"):
            default_config(torch.bfloat16, 1)


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


def test_rows_per_program_is_parsed_and_validated():
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig

    assert LaunchConfig.parse("g2x2pr1") == LaunchConfig(
        block_n=2, num_warps=2, gemv=True, prefetch=True, rows_per_program=1)
    assert LaunchConfig.parse("g4x2x2r4") == LaunchConfig(
        block_n=4, num_warps=2, gemv=True, block_m=2, rows_per_program=4)
    assert LaunchConfig.parse("g16x4x16dr16") == LaunchConfig(
        block_n=16, num_warps=4, gemv=True, block_m=16, dot=True, rows_per_program=16)
    assert LaunchConfig.parse("g2x2p").rows_per_program == 0
    for bad in ("g2x2pr", "g2x2r0", "g2x2rp", "g2x2r-1", "16x128x4x3r1"):
        with pytest.raises(ValueError, match="launch config"):
            LaunchConfig.parse(bad)
    with pytest.raises(ValueError, match="rows_per_program"):
        LaunchConfig(rows_per_program=2)
    with pytest.raises(ValueError, match="rows_per_program"):
        LaunchConfig(gemv=True, rows_per_program=-1)


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


def test_gemv_config_is_parsed_and_validated(monkeypatch):
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig, default_config

    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "g4x2")
    assert default_config(torch.bfloat16, 1) == LaunchConfig(block_n=4, num_warps=2,
                                                              gemv=True)
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "g2x2x4")
    assert default_config(torch.bfloat16, 1) == LaunchConfig(block_n=2, num_warps=2,
                                                              gemv=True, block_m=4)
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "g2x2p")
    assert default_config(torch.bfloat16, 1) == LaunchConfig(block_n=2, num_warps=2,
                                                              gemv=True, prefetch=True)
    for bad in ("g4", "g3x4", "gx", "g2x2x3", "g2x2x4x1", "g2x2x4p"):
        monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", bad)
        with pytest.raises(ValueError, match="EAGLE_HAL_FUSED_LINEAR_CONFIG"):
            default_config(torch.bfloat16, 1)
    with pytest.raises(ValueError, match="powers of two"):
        LaunchConfig(block_n=24, gemv=True)


def test_the_gemv_split_can_be_set_for_benchmarks(monkeypatch):
    """EAGLE_HAL_GEMV=ROWS:CONFIG moves the row count up to which 16-bit forwards take the
    gemv kernel, and its config; float32 never takes it; a malformed value says how."""
    from eagle_hal.ops.triton.fused_linear_config import GEMV_CONFIG, GEMV_ROWS, default_config

    assert default_config(torch.bfloat16, GEMV_ROWS) == GEMV_CONFIG
    assert not default_config(torch.bfloat16, GEMV_ROWS + 1).gemv
    monkeypatch.setenv("EAGLE_HAL_GEMV", "8:g2x2p")
    assert default_config(torch.bfloat16, 8).prefetch
    assert not default_config(torch.bfloat16, 9).gemv
    assert not default_config(torch.float32, 1).gemv
    for bad in ("8", "8:16x128x4x3", "17:g2x2", "x:g2x2"):
        monkeypatch.setenv("EAGLE_HAL_GEMV", bad)
        with pytest.raises(ValueError, match="EAGLE_HAL_GEMV"):
            default_config(torch.bfloat16, 1)


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
            assert torch.equal(one[0], many[row])


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


def test_gemv_dot_config_is_parsed_and_validated(monkeypatch):
    """``gBLOCK_NxWARPSxBLOCK_Md`` is dot mode, for block_n and block_m >= 16; it can be
    forced for 16-bit rows up to 16 or set as the gemv config; malformed ones say how."""
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig, default_config

    dot = LaunchConfig(block_n=16, num_warps=4, gemv=True, block_m=16, dot=True)
    assert LaunchConfig.parse("g16x4x16d") == dot
    assert LaunchConfig.parse("g32x8x32d") == LaunchConfig(block_n=32, num_warps=8,
                                                           gemv=True, block_m=32, dot=True)
    assert not LaunchConfig.parse("g16x4x16").dot
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "g16x4x16d")
    assert default_config(torch.bfloat16, 5) == dot
    assert default_config(torch.bfloat16, 16) == dot
    assert not default_config(torch.bfloat16, 17).gemv
    monkeypatch.delenv("EAGLE_HAL_FUSED_LINEAR_CONFIG")
    monkeypatch.setenv("EAGLE_HAL_GEMV", "16:g16x4x16d")
    assert default_config(torch.bfloat16, 16) == dot
    assert not default_config(torch.float32, 16).gemv
    for bad in ("g16x4d", "g8x4x16d", "g16x4x8d", "g16x4x16pd", "g16x4x16dp", "g16x4xd",
                "16x128x4x3d"):
        with pytest.raises(ValueError, match=r"gBLOCK_NxWARPS\[xBLOCK_M\]\[p\|d\]"):
            LaunchConfig.parse(bad)
    with pytest.raises(ValueError, match="dot is for the gemv kernel"):
        LaunchConfig(block_m=16, dot=True)
    with pytest.raises(ValueError, match="dot is for the gemv kernel"):
        LaunchConfig(block_n=8, gemv=True, block_m=16, dot=True)


def test_the_wide_rows_config_is_chosen_by_environment(monkeypatch) -> None:
    """EAGLE_HAL_FUSED_LINEAR_WIDE picks the launch past the gemv split up to 16 rows;
    the gemv rows keep theirs."""
    from eagle_hal.ops.triton.fused_linear_config import (
        GEMV_CONFIG,
        GEMV_ROWS,
        LaunchConfig,
        default_config,
    )

    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_WIDE", "g16x8x16d")
    assert default_config(torch.bfloat16, GEMV_ROWS) == GEMV_CONFIG
    assert default_config(torch.bfloat16, 16) == LaunchConfig.parse("g16x8x16d")
    assert default_config(torch.bfloat16, 17) == LaunchConfig(block_k=64)
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_WIDE", "bad")
    with pytest.raises(ValueError, match="EAGLE_HAL_FUSED_LINEAR_WIDE"):
        default_config(torch.bfloat16, 8)
