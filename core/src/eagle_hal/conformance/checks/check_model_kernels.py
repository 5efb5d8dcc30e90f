"""Area 3, model kernels: every field of the backend's ``ModelKernels`` against its
definition (``eagle_hal.hal.model_kernels``), in each dtype the backend declares.

Oracles run on the host in float64 from the same (rounded) inputs: RMSNorm, the residual
add, rotary (half-split pairs), SiLU-gated product, the lm_head product ``x @ W.T``, the
softmax top-k (ids exact, ties to the smaller id, probabilities close) and the fused
small-batch projections (their prologue and epilogue composed from the same oracles).
Floats are compared within the backend's tolerance for the output dtype. Optional fields
(``fused_linear``, ``softmax_topk``, ``logits``) that a backend leaves ``None`` are skipped
with that reason: the core then runs torch's op instead.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from eagle_hal.conformance.compare import assert_close, assert_same
from eagle_hal.conformance.requirements import requires

DTYPES = [pytest.param(d, marks=requires(f"dtype:{d}"), id=d) for d in ("float32", "bfloat16")]
EPS = 1e-6
ROWS = [1, 5, 16]  # a decode step, a chain's verify, a 16-node tree


@pytest.fixture(scope="module")
def kernels(backend: Any) -> Any:
    return backend.model_kernels()


def _randn(*shape: int, seed: int, dtype: str, device: Any, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(shape, generator=gen)).to(getattr(torch, dtype)).to(device)


def _d(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu", torch.float64)


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Half-split rotary of ``x`` ``[T, heads, D]`` with ``cos``/``sin`` ``[T, D]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def _tables(rows: int, head_dim: int, dtype: str, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    positions = torch.arange(rows, dtype=torch.float64) * 37 + 5
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = positions[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    kind = getattr(torch, dtype)
    return angles.cos().to(kind).to(device), angles.sin().to(kind).to(device)


def _needs(kernels: Any, field: str) -> Any:
    value = getattr(kernels, field)
    if value is None:
        pytest.skip(f"the backend's ModelKernels has no {field} (the core runs torch's op)")
    return value


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
def test_rms_norm_and_add_rms_norm(kernels, device, tolerance, dtype, rows):
    """rms_norm; add_rms_norm returns (rms_norm(x + residual), x + residual) and leaves its
    inputs unchanged."""
    atol, rtol = tolerance(dtype)
    x = _randn(rows, 96, seed=rows, dtype=dtype, device=device)
    residual = _randn(rows, 96, seed=rows + 1, dtype=dtype, device=device)
    weight = 1 + _randn(96, seed=rows + 2, dtype=dtype, device=device, scale=0.1)
    before = (x.clone(), residual.clone())
    assert_close("rms_norm", kernels.rms_norm(x, weight, EPS), _rms(_d(x), _d(weight)), atol, rtol)
    normed, total = kernels.add_rms_norm(x, residual, weight, EPS)
    expected_total = (_d(x) + _d(residual)).to(x.dtype).double()  # the sum, rounded
    assert_close("add_rms_norm stream", total, expected_total, atol, rtol)
    assert_close("add_rms_norm normed", normed, _rms(expected_total, _d(weight)), atol, rtol)
    assert torch.equal(x, before[0]) and torch.equal(residual, before[1]), "inputs modified"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
def test_rotary_on_strided_views(kernels, device, tolerance, dtype, rows):
    """rotary on q and k that are views of one fused QKV row (3 query heads, 1 KV head)."""
    atol, rtol = tolerance(dtype)
    head_dim = 32
    qkv = _randn(rows, 5 * head_dim, seed=10 + rows, dtype=dtype, device=device)
    q = qkv[:, : 3 * head_dim].view(rows, 3, head_dim)
    k = qkv[:, 3 * head_dim : 4 * head_dim].view(rows, 1, head_dim)
    cos, sin = _tables(rows, head_dim, dtype, device)
    got_q, got_k = kernels.rotary(q, k, cos, sin)
    assert_close("rotary q", got_q, _rotate(_d(q), _d(cos), _d(sin)), atol, rtol)
    assert_close("rotary k", got_k, _rotate(_d(k), _d(cos), _d(sin)), atol, rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", ROWS)
def test_silu_mul(kernels, device, tolerance, dtype, rows):
    """silu_mul of [gate | up] is silu(gate) * up."""
    atol, rtol = tolerance(dtype)
    gate_up = _randn(rows, 2 * 80, seed=20 + rows, dtype=dtype, device=device)
    gate, up = _d(gate_up).chunk(2, dim=-1)
    assert_close("silu_mul", kernels.silu_mul(gate_up), torch.nn.functional.silu(gate) * up,
                 atol, rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 2, 6, 16, 40])
def test_logits(kernels, device, tolerance, dtype, rows):
    """logits(x, W) is x @ W.T, [n, V] contiguous in W's dtype, for a wide W."""
    logits = _needs(kernels, "logits")
    atol, rtol = tolerance(dtype)
    x = _randn(rows, 64, seed=30 + rows, dtype=dtype, device=device)
    weight = _randn(3001, 64, seed=31, dtype=dtype, device=device, scale=64**-0.5)
    got = logits(x, weight)
    assert got.dtype == weight.dtype and got.is_contiguous(), (got.dtype, got.stride())
    assert_close("logits", got, _d(x) @ _d(weight).T, atol, rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 4, 10])
def test_softmax_topk(kernels, device, tolerance, dtype, k):
    """softmax_topk: the k most probable ids (descending, equal probabilities to the
    smaller id) and their float32 softmax probabilities."""
    softmax_topk = _needs(kernels, "softmax_topk")
    atol, rtol = tolerance("float32")
    gen = torch.Generator().manual_seed(40 + k)
    logits = (3 * torch.randn(5, 2053, generator=gen)).to(getattr(torch, dtype))
    logits[0, 7] = logits[0, 900] = logits[0].max() + 1  # a tie at the top: id 7 first
    probs, ids = softmax_topk(logits.to(device), k)
    exact = torch.softmax(logits.double(), dim=-1)
    # oracle order: probability descending, then id ascending (a stable sort keeps ties in
    # id order)
    expected_ids = torch.sort(-exact, dim=-1, stable=True).indices[:, :k]
    assert_same("softmax_topk ids (a tie in row 0)", ids, expected_ids)
    assert probs.dtype == torch.float32, probs.dtype
    assert_close("softmax_topk probs", probs, exact.gather(1, ids.cpu()), atol, rtol)


def _stream(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None):
    """The oracle's (stream, projection input): x [+ residual, rounded] [normed]."""
    total = _d(x) if residual is None else (_d(x) + _d(residual)).to(x.dtype).double()
    normed = total if norm_weight is None else _rms(total, _d(norm_weight))
    return total, normed.to(x.dtype).double()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual,norm,bias",
                         [(True, True, False), (False, True, True), (False, False, False)])
def test_fused_qkv_rotary(kernels, device, tolerance, dtype, residual, norm, bias):
    """fused_linear.qkv_rotary: [residual add +] [RMSNorm +] QKV [+ bias] + rotary, and the
    stream (``x`` itself without a residual), for up to max_tokens rows."""
    fused = _needs(kernels, "fused_linear")
    atol, rtol = tolerance(dtype)
    rows, hidden, heads, kv_heads, head_dim = min(5, fused.max_tokens), 96, 3, 1, 32
    x = _randn(rows, hidden, seed=50, dtype=dtype, device=device)
    res = _randn(rows, hidden, seed=51, dtype=dtype, device=device) if residual else None
    norm_weight = (1 + _randn(hidden, seed=52, dtype=dtype, device=device, scale=0.1)
                   if norm else None)
    width = (heads + 2 * kv_heads) * head_dim
    weight = _randn(width, hidden, seed=53, dtype=dtype, device=device, scale=hidden**-0.5)
    b = _randn(width, seed=54, dtype=dtype, device=device, scale=0.1) if bias else None
    cos, sin = _tables(rows, head_dim, dtype, device)
    q, k, v, stream = fused.qkv_rotary(x, res, norm_weight, EPS, weight, b, cos, sin, heads,
                                       kv_heads)
    total, normed = _stream(x, res, norm_weight)
    qkv = normed @ _d(weight).T + (0 if b is None else _d(b))
    qkv = qkv.to(x.dtype).double()  # the GEMM's output is rounded before rotary
    eq, ek, ev = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
    assert_close("qkv_rotary q", q, _rotate(eq.view(rows, heads, head_dim), _d(cos), _d(sin)),
                 atol, rtol)
    assert_close("qkv_rotary k", k, _rotate(ek.view(rows, kv_heads, head_dim), _d(cos), _d(sin)),
                 atol, rtol)
    assert_close("qkv_rotary v", v, ev.view(rows, kv_heads, head_dim), atol, rtol)
    assert_close("qkv_rotary stream", stream, total, atol, rtol)
    if res is None:
        assert stream is x, "without a residual the stream must be x itself"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("residual,norm", [(True, True), (False, True), (False, False)])
def test_fused_gate_up_silu(kernels, device, tolerance, dtype, residual, norm):
    """fused_linear.gate_up_silu: [residual add +] [RMSNorm +] gate/up + silu(gate) * up."""
    fused = _needs(kernels, "fused_linear")
    atol, rtol = tolerance(dtype)
    rows, hidden, inter = min(7, fused.max_tokens), 64, 80
    x = _randn(rows, hidden, seed=60, dtype=dtype, device=device)
    res = _randn(rows, hidden, seed=61, dtype=dtype, device=device) if residual else None
    norm_weight = (1 + _randn(hidden, seed=62, dtype=dtype, device=device, scale=0.1)
                   if norm else None)
    weight = _randn(2 * inter, hidden, seed=63, dtype=dtype, device=device, scale=hidden**-0.5)
    activated, stream = fused.gate_up_silu(x, res, norm_weight, EPS, weight)
    total, normed = _stream(x, res, norm_weight)
    gate, up = (normed @ _d(weight).T).to(x.dtype).double().chunk(2, dim=-1)
    assert_close("gate_up_silu", activated, torch.nn.functional.silu(gate) * up, atol, rtol)
    assert_close("gate_up_silu stream", stream, total, atol, rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias,add", [(False, False), (True, False), (False, True)])
def test_fused_linear(kernels, device, tolerance, dtype, bias, add):
    """fused_linear.linear: x @ W.T [+ bias], rounded, [+ add], rounded."""
    fused = _needs(kernels, "fused_linear")
    atol, rtol = tolerance(dtype)
    rows = min(9, fused.max_tokens)
    x = _randn(rows, 50, seed=70, dtype=dtype, device=device)
    weight = _randn(37, 50, seed=71, dtype=dtype, device=device, scale=50**-0.5)
    b = _randn(37, seed=72, dtype=dtype, device=device) if bias else None
    extra = _randn(rows, 37, seed=73, dtype=dtype, device=device) if add else None
    expected = (_d(x) @ _d(weight).T + (0 if b is None else _d(b))).to(x.dtype).double()
    if extra is not None:
        expected = expected + _d(extra)
    assert_close("linear", fused.linear(x, weight, b, extra), expected, atol, rtol)
