"""Cases and oracles shared by the fused-projection tests (``test_fused_linear.py``,
``test_fused_gemv_kernel.py``).

Oracle: the pure-torch reference kernels (``ops/reference_model``) around ``F.linear``, the
way an unfused decoder layer runs them; for the split-K and matrix-vector launches the
matmul summed in float64 and rounded once (``exact_linear``). Without an accelerator the
kernels run under TRITON_INTERPRET=1 on CPU tensors; where neither is there, importing
this module skips the test module that imports it.
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


def assert_same_rows(alone: torch.Tensor, in_batch: torch.Tensor) -> None:
    """A row's outputs alone equal its outputs inside a batch. Compiled, bit for bit: the
    kernels keep one summation order for every row count that shares a launch. Interpreted,
    ``tl.dot`` is NumPy's matmul, and the host BLAS may sum a one-row block in another order
    than a many-row one (OpenBLAS picks its kernel by shape and CPU): there the rows agree to
    float32 rounding, and bfloat16 outputs (rounded after a float32 dot) still bit for bit."""
    if INTERPRETED and alone.dtype == torch.float32:
        torch.testing.assert_close(alone, in_batch, atol=1e-4, rtol=1e-5)
    else:
        assert torch.equal(alone, in_batch)


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


# The case builders' reduction: K = 100 features, no power of two.
SPLIT_K_FEATURES = 100


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
