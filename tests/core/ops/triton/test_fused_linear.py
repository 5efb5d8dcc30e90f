"""The fused small-batch projections (``ops/triton/fused_linear``) equal the unfused ops:
the ``tl.dot`` kernel (``ops/triton/fused_linear_kernel``), whole and split over K, and
the checks on what a launch accepts.

Oracle: the pure-torch reference kernels (``ops/reference_model``) around ``F.linear``, the
way an unfused decoder layer runs them. Without an accelerator the kernels run under
TRITON_INTERPRET=1 on CPU tensors; float32 agrees to summation order, bfloat16 to an ulp or
two (the interpreter rounds float32 -> bfloat16 toward zero). The cases, the float64
oracle of the split launches and the tolerances are in ``fused_linear_cases``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from eagle_hal.ops import reference_model as reference  # noqa: E402
from eagle_hal.ops.triton import fused_linear as fused  # noqa: E402
from fused_linear_cases import (  # noqa: E402
    DTYPES,
    EPS,
    PROJECTIONS,
    ROW_INPUTS,
    as_tuple,
    assert_close,
    assert_same_rows,
    gate_up_case,
    gate_up_oracle,
    linear_case,
    randn,
    rotary_tables,
    stream_and_input,
)


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
        assert_same_rows(fused.linear(x[row : row + 1], weight)[0], batched[row])


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


def split_config(splits: int) -> fused.LaunchConfig:
    return fused.LaunchConfig(block_k=16, splits=splits)


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
