"""The Triton model kernels equal the pure-torch reference (``ops/reference_model``).

Without an accelerator they run under TRITON_INTERPRET=1 on CPU tensors. Float32 results
agree to rounding of the RMS reduction order. In bfloat16 the interpreter rounds
float32 -> bfloat16 toward zero (a GPU rounds to nearest), so results may differ from the
reference by an ulp or two: the bound there is relative, 2^-6.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")

from eagle_hal.model.config import ModelConfig, RopeScaling, RopeScalingKind  # noqa: E402
from eagle_hal.model.layers import RotaryEmbedding  # noqa: E402
from eagle_hal.ops import reference_model as reference  # noqa: E402
from eagle_hal.ops.triton import model_kernels as fused  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = torch.device("cpu") if INTERPRETED else torch.accelerator.current_accelerator()
DTYPES = [torch.float32, torch.bfloat16]
EPS = 1e-5


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(actual.float(), expected.float(), atol=2e-2, rtol=2**-6)


def randn(*shape: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator).to(device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", [(1, 576), (3, 37), (5, 1), (2, 2100), (0, 64)])
def test_rms_norm_equals_reference(dtype, rows, hidden):
    """RMSNorm over odd hidden sizes, one row, several programs' worth and no rows."""
    x = randn(rows, hidden, dtype=dtype, seed=hidden)
    weight = 1 + 0.1 * randn(hidden, dtype=dtype, seed=hidden + 1)
    assert_close(fused.rms_norm(x, weight, EPS), reference.rms_norm(x, weight, EPS))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 576), (4, 37), (2, 3, 48)])
def test_add_rms_norm_returns_norm_and_sum(dtype, shape):
    """The fused add + RMSNorm returns both the norm of the sum and the sum, inputs intact."""
    x = randn(*shape, dtype=dtype, seed=1)
    residual = randn(*shape, dtype=dtype, seed=2)
    weight = randn(shape[-1], dtype=dtype, seed=3)
    before = (x.clone(), residual.clone())
    normed, total = fused.add_rms_norm(x, residual, weight, EPS)
    expected_normed, expected_total = reference.add_rms_norm(x, residual, weight, EPS)
    assert_close(total, expected_total)
    assert_close(normed, expected_normed)
    assert torch.equal(x, before[0]) and torch.equal(residual, before[1])


def test_rms_norm_reads_a_strided_input():
    """Rows of a wider tensor (a column slice) normalise like their contiguous copy."""
    wide = randn(4, 80, dtype=torch.float32, seed=4)
    x, weight = wide[:, 10:50], randn(40, dtype=torch.float32, seed=5)
    assert_close(fused.rms_norm(x, weight, EPS), reference.rms_norm(x.contiguous(), weight, EPS))


def _rope_config(head_dim: int, scaling: RopeScaling) -> ModelConfig:
    return ModelConfig(
        architecture="llama", vocab_size=10, hidden_size=head_dim, intermediate_size=8,
        num_layers=1, num_heads=1, num_kv_heads=1, head_dim=head_dim,
        max_position_embeddings=4096, rope_theta=500000.0, rope_scaling=scaling,
    )


LLAMA3 = RopeScaling(kind=RopeScalingKind.LLAMA3, factor=8.0, low_freq_factor=1.0,
                     high_freq_factor=4.0, original_max_position_embeddings=64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "tokens,q_heads,k_heads,head_dim,scaling",
    [(1, 9, 3, 64, RopeScaling()), (5, 4, 4, 10, RopeScaling()), (3, 5, 1, 2, RopeScaling()),
     (7, 6, 2, 48, LLAMA3), (0, 2, 1, 8, RopeScaling())],
    ids=["smollm2", "mha-d10", "d2", "llama3-d48", "empty"],
)
def test_rotary_on_fused_qkv_views_equals_reference(dtype, tokens, q_heads, k_heads, head_dim,
                                                    scaling):
    """Rotary applied to q and k given as strided views of one fused QKV row, with the model's
    own cos/sin rows at scattered positions (plain RoPE and llama3 scaling)."""
    q_size, kv_size = q_heads * head_dim, k_heads * head_dim
    qkv = randn(tokens, q_size + 2 * kv_size, dtype=dtype, seed=head_dim)
    q, k, _ = qkv.split([q_size, kv_size, kv_size], dim=-1)
    q, k = q.view(tokens, q_heads, head_dim), k.view(tokens, k_heads, head_dim)
    positions = torch.arange(tokens, device=DEVICE) * 37 + 3
    cos, sin = RotaryEmbedding(_rope_config(head_dim, scaling), DEVICE).cos_sin(positions, dtype)
    before = qkv.clone()
    q_out, k_out = fused.rotary(q, k, cos, sin)
    expected_q, expected_k = reference.rotary(q, k, cos, sin)
    assert q_out.is_contiguous() and k_out.is_contiguous()
    assert_close(q_out, expected_q)
    assert_close(k_out, expected_k)
    assert torch.equal(qkv, before)


def test_rotary_rejects_odd_head_dim():
    """An odd head dimension has no half-split pairing."""
    q = randn(2, 2, 5, dtype=torch.float32, seed=0)
    with pytest.raises(ValueError, match="even D"):
        fused.rotary(q, q, q[:, 0], q[:, 0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(1, 1536), (3, 23), (2, 1), (1, 2500), (0, 8)])
def test_silu_mul_equals_reference(dtype, rows, width):
    """silu(gate) * up over a fused gate_up row, odd widths and several column blocks."""
    gate_up = 3 * randn(rows, 2 * width, dtype=dtype, seed=width)
    assert_close(fused.silu_mul(gate_up), reference.silu_mul(gate_up))


def test_triton_model_kernels_bundle_names_its_functions():
    """The bundle a backend hands out is the module's four kernels."""
    kernels = fused.TRITON_MODEL_KERNELS
    assert kernels.name == "triton"
    assert (kernels.rms_norm, kernels.add_rms_norm, kernels.rotary, kernels.silu_mul) == (
        fused.rms_norm, fused.add_rms_norm, fused.rotary, fused.silu_mul)
