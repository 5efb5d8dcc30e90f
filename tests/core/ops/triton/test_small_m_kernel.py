"""The weight-streaming small-M kernel (``ops/triton/small_m_kernel``) behind the fused
projections, its dispatch (``fused_linear_config.small_m_config``) and the dependent-launch
bundle.

Oracle: the norm, a matmul summed in float64 and rounded once, and the epilogue, from the
pure-torch reference kernels (``ops/reference_model``), the way an unfused decoder layer
runs them (``fused_linear_cases``); a row alone against the same row in a batch, bit for
bit. Without an accelerator the kernels run under TRITON_INTERPRET=1 on CPU tensors:
SmolLM2-135M's reductions are kept whole, their output columns cut to a few programs'
worth, and one projection (O, 576 x 576) runs at its full shape.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from eagle_hal.ops.triton import fused_linear as fused  # noqa: E402
from eagle_hal.ops.triton.fused_linear_config import (  # noqa: E402
    GEMV_ROWS,
    SMALL_M_ROWS,
    LaunchConfig,
    LaunchPolicy,
    small_m_config,
    small_m_launch,
)
from fused_linear_cases import (  # noqa: E402
    DTYPES,
    PROJECTIONS,
    ROW_INPUTS,
    as_tuple,
    assert_close,
    assert_same_rows,
)

ROWS = [1, 2, 5, 16, 48, 64]
# SmolLM2-135M (hidden 576, 9 query / 3 KV heads of 64, intermediate 1536): weight rows x
# input features of each projection
SMOLLM2 = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}
# Llama-3.1-8B (hidden 4096, 32 / 8 heads of 128, intermediate 14336)
LLAMA_8B = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
            "down": (4096, 14336)}
PAIRED = {"qkv": True, "o": False, "gate_up": True, "down": False}

# Each SmolLM2 projection with its reduction whole and its epilogue, the outputs cut to a
# few programs: Q/K/V one query and one KV head of 64 (with rotary, after the residual add
# and RMSNorm), gate/up 64 columns each, O and down 48 columns with an added tensor.
SMOLLM2_CUT = {
    "qkv": ("qkv_rotary", (True, True, False),
            dict(heads=1, kv_heads=1, head_dim=64, hidden=576)),
    "o": ("linear", (False, False), dict(out_features=48, hidden=576)),
    "gate_up": ("gate_up_silu", (True, True), dict(intermediate=64, hidden=576)),
    "down": ("linear", (False, True), dict(out_features=48, hidden=1536)),
}


def small_m(rows: int, case: dict, paired: bool) -> LaunchConfig:
    """The default small-M tiles for the case's reduction (also for the row counts the
    dispatch leaves to the gemv kernel)."""
    return small_m_launch(rows, case["x"].shape[1], paired)


def run_and_check(projection: str, case: dict, config: LaunchConfig) -> tuple:
    _, call, oracle = PROJECTIONS[projection]
    actual = as_tuple(call(**case, config=config))
    for got, expected in zip(actual, as_tuple(oracle(case)), strict=True):
        assert_close(got, expected.reshape(got.shape))
    return actual


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("name", list(SMOLLM2_CUT))
def test_smollm2_projections_equal_float64_oracle(name, rows):
    """Every SmolLM2-135M projection's reduction (576 or 1536 features, in 256- or 128-wide
    splits) and epilogue, bfloat16, at 1 to 64 rows, with the default small-M tiles."""
    projection, flags, sizes = SMOLLM2_CUT[name]
    build = PROJECTIONS[projection][0]
    case = build(rows, torch.bfloat16, *flags, **sizes)
    config = small_m(rows, case, PAIRED[name])
    assert config.small_m and triton_splits(case, config) > 1
    run_and_check(projection, case, config)


def triton_splits(case: dict, config: LaunchConfig) -> int:
    return -(-case["x"].shape[1] // config.block_k)


@pytest.mark.parametrize("rows", ROWS)
def test_the_full_o_projection_equals_float64_oracle(rows):
    """SmolLM2-135M's O projection at its full shape (576 x 576), bfloat16; from
    ``GEMV_ROWS + 1`` rows on, the dispatch picks the small-M kernel by itself."""
    build = PROJECTIONS["linear"][0]
    case = build(rows, torch.bfloat16, False, False, out_features=576, hidden=576)
    picked = small_m_config(torch.bfloat16, rows, 576, 576, False)
    assert (picked is not None) == (rows > GEMV_ROWS)
    run_and_check("linear", case, picked or small_m(rows, case, False))


# The case builders' reduction, K = 100: 32-wide splits (4, the last a partial one) and
# one 128-wide tile (no split).
BLOCKS_K = [32, 128]
FLAGS = {
    "qkv_rotary": [(True, True, False), (False, True, True), (True, False, False)],
    "gate_up_silu": [(True, True), (False, True), (True, False)],
    "linear": [(False, False), (True, False), (True, True)],
}


@pytest.mark.parametrize("block_k", BLOCKS_K)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 5, 16, 48, 64])
@pytest.mark.parametrize("projection", list(PROJECTIONS))
def test_each_fusion_equals_float64_oracle(projection, rows, dtype, block_k):
    """Each epilogue with each prologue (residual add, RMSNorm, bias, added tensor), split
    over K or not, equals norm + float64 matmul + epilogue; the stream equals the sum."""
    build = PROJECTIONS[projection][0]
    flags = FLAGS[projection][rows % 3]
    case = build(rows, dtype, *flags)
    block_n = 32 if projection == "gate_up_silu" else 16
    run_and_check(projection, case,
                  LaunchConfig(block_n=block_n, block_k=block_k, small_m=True))


@pytest.mark.parametrize("block_k", BLOCKS_K)
@pytest.mark.parametrize("projection,flags", [
    ("qkv_rotary", (True, True, True)), ("gate_up_silu", (True, True)),
    ("linear", (True, True)),
])
def test_a_row_alone_equals_the_row_in_a_batch(projection, flags, block_k):
    """Within a padded row block (here 16) a row's sums do not depend on the other rows:
    a token's outputs are bit for bit the same alone, in a batch of 5 and in one of 16."""
    build, call, _ = PROJECTIONS[projection]
    batch = build(16, torch.bfloat16, *flags)

    def first(count):
        return {name: value[:count] if name in ROW_INPUTS and value is not None else value
                for name, value in batch.items()}

    config = LaunchConfig(block_k=block_k, small_m=True)
    batched = as_tuple(call(**batch, config=config))
    for count in (1, 5):
        fewer = as_tuple(call(**first(count), config=config))
        for few, many in zip(fewer, batched, strict=True):
            assert_same_rows(few[:count], many[:count])


def test_split_launches_are_deterministic_and_leave_the_counters_at_zero():
    """The last program of a tile resets its arrival counter: launch after launch (of
    another grid in between) gives the same bits, and the counters end at 0."""
    build = PROJECTIONS["gate_up_silu"][0]
    case = build(48, torch.bfloat16, True, True)
    other = PROJECTIONS["linear"][0](5, torch.bfloat16, True, False, out_features=150)
    config = LaunchConfig(block_n=32, block_k=32, small_m=True)

    first = fused.gate_up_silu(**case, config=config)
    fused.linear(**other, config=config)
    for _ in range(2):
        again = fused.gate_up_silu(**case, config=config)
        for a, b in zip(first, again, strict=True):
            assert torch.equal(a, b)
    assert not fused._ARRIVALS[case["x"].device].any()


def test_the_dispatch_takes_the_small_model_shapes_from_past_the_gemv_split():
    """16-bit forwards past ``GEMV_ROWS`` up to 64 rows take the small-M kernel for every
    SmolLM2-135M projection, with 16-, 32- or 64-row blocks; one row, float32, more than
    64 rows, a policy that forces a launch or sets a wide one, or ``small_m=False`` do not;
    nor do Llama-3.1-8B's weights, over ``SMALL_M_MAX_WEIGHT``."""
    assert SMALL_M_ROWS[1] == 64 <= fused.MAX_TOKENS
    for name, (out_rows, features) in SMOLLM2.items():
        for rows in range(GEMV_ROWS + 1, 65):
            config = small_m_config(torch.bfloat16, rows, out_rows, features, PAIRED[name])
            assert config is not None and config.small_m, (name, rows)
            assert config.block_n == (32 if PAIRED[name] else 16)
            assert config.block_k <= 256
        for rows in (1, GEMV_ROWS, 65):
            assert small_m_config(torch.bfloat16, rows, out_rows, features, False) is None
        assert small_m_config(torch.float32, 16, out_rows, features, False) is None
        for policy in (LaunchPolicy(forced=LaunchConfig()), LaunchPolicy(wide=LaunchConfig()),
                       LaunchPolicy(small_m=False)):
            assert small_m_config(torch.bfloat16, 16, out_rows, features, False,
                                  policy) is None
        two = small_m_config(torch.bfloat16, 2, out_rows, features, False,
                             LaunchPolicy(gemv_rows=1))
        assert two is not None and two.small_m  # the gemv split moved to one row
    for out_rows, features in LLAMA_8B.values():
        assert small_m_config(torch.bfloat16, 16, out_rows, features, False) is None


def test_the_small_m_spelling_is_parsed_and_validated():
    assert LaunchConfig.parse("s16x128x4") == LaunchConfig(block_n=16, block_k=128,
                                                           num_warps=4, small_m=True)
    assert LaunchConfig.parse("s32x256x8") == LaunchConfig(block_n=32, block_k=256,
                                                           num_warps=8, small_m=True)
    for bad in ("s16x128", "s16x128x4x3", "s16x96x4", "sx"):
        with pytest.raises(ValueError, match="launch config"):
            LaunchConfig.parse(bad)
    with pytest.raises(ValueError, match="small_m"):
        LaunchConfig(gemv=True, small_m=True)


def test_a_dependent_launch_bundle_gives_the_same_bits():
    """``fused_linear_kernels(dependent_launch=True)``, the bundle of a backend declaring
    ``Capabilities.dependent_launch``, computes what the plain bundle computes (the
    interpreter launches it plainly; ``tests/backends/cuda`` compares compiled replays);
    the library's default kernels take it only where the capability says so."""
    from eagle_hal.backends.defaults import model_kernels

    plain = fused.FUSED_LINEAR_KERNELS
    dependent = fused.fused_linear_kernels(dependent_launch=True)
    assert dependent != plain and dependent.max_tokens == plain.max_tokens
    build = PROJECTIONS["gate_up_silu"][0]
    case = build(16, torch.bfloat16, True, True, hidden=64)
    args = (case["x"], case["residual"], case["norm_weight"], case["eps"], case["weight"])
    for a, b in zip(plain.gate_up_silu(*args), dependent.gate_up_silu(*args), strict=True):
        assert torch.equal(a, b)
    assert model_kernels(True).fused_linear is plain
    chosen = model_kernels(True, True).fused_linear
    for function in (chosen.qkv_rotary, chosen.gate_up_silu, chosen.linear):
        assert function.keywords["dependent_launch"] is True
