"""The small-M projections on a real GPU: captured-graph replays with programmatic dependent
launch give the same bits as without, and the kernel matches torch's GEMMs.

Oracle: the same chain of projections captured without dependent launch (bit for bit),
and the unfused ops (the reference norm around ``F.linear``, bf16 tolerance). Skipped
where no CUDA device is visible; the dependent-launch test also where the GPU has no
programmatic dependent launch (compute capability below 9.0).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 576, 9, 3, 64, 1536  # SmolLM2-135M


@pytest.fixture(scope="module")
def cuda():
    if torch.version.cuda is None or not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("triton")
    return torch.device("cuda", 0)


def layer(device, rows, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)

    def rand(*shape, scale=1.0):
        return (scale * torch.randn(shape, generator=g, device=device)).bfloat16()

    width = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    angles = torch.rand(rows, HEAD_DIM // 2, generator=g, device=device) * 6.28
    angles = torch.cat([angles, angles], dim=-1)
    return dict(
        x=rand(rows, HIDDEN), residual=rand(rows, HIDDEN), norm1=1 + rand(HIDDEN, scale=0.1),
        qkv=rand(width, HIDDEN, scale=HIDDEN**-0.5), o=rand(HIDDEN, HIDDEN, scale=HIDDEN**-0.5),
        norm2=1 + rand(HIDDEN, scale=0.1), gate_up=rand(2 * INTER, HIDDEN, scale=HIDDEN**-0.5),
        down=rand(HIDDEN, INTER, scale=INTER**-0.5), cos=angles.cos().bfloat16(),
        sin=angles.sin().bfloat16(),
    )


def forward(w, kernels):
    """Two layers' projections (attention stood in for by q), through ``kernels``."""
    hidden, residual = w["x"], w["residual"]
    rows = hidden.shape[0]
    for _ in range(2):
        q, _, _, residual = kernels.qkv_rotary(hidden, residual, w["norm1"], 1e-5, w["qkv"],
                                               None, w["cos"], w["sin"], HEADS, KV_HEADS)
        hidden = kernels.linear(q.reshape(rows, -1), w["o"], None, None)
        activated, residual = kernels.gate_up_silu(hidden, residual, w["norm2"], 1e-5,
                                                   w["gate_up"])
        hidden = kernels.linear(activated, w["down"], None, residual)
    return hidden, residual


def captured(call):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = call()
    return graph, outputs


@pytest.mark.parametrize("rows", [2, 5, 16, 33, 64])
def test_replays_with_dependent_launch_equal_replays_without(cuda, rows):
    """The same captured chain of projections, launched with and without programmatic
    dependent launch, gives the same bits replay after replay."""
    if torch.cuda.get_device_capability(cuda)[0] < 9:
        pytest.skip("programmatic dependent launch needs compute capability 9.0+")
    from eagle_hal import select_backend
    from eagle_hal.ops.triton.fused_linear import fused_linear_kernels
    from eagle_hal.ops.triton.fused_linear_config import LaunchPolicy

    assert select_backend("cuda:0", backend="cuda").capabilities.dependent_launch
    w = layer(cuda, rows)
    policy = LaunchPolicy(gemv_rows=1)  # every row count here on the small-M kernel
    with torch.inference_mode():
        plain_graph, plain = captured(lambda: forward(w, fused_linear_kernels(policy)))
        pdl_graph, pdl = captured(lambda: forward(
            w, fused_linear_kernels(policy, dependent_launch=True)))
        for _ in range(3):
            plain_graph.replay()
            pdl_graph.replay()
            torch.cuda.synchronize()
            for a, b in zip(plain, pdl, strict=True):
                assert torch.equal(a, b)
        eager = forward(w, fused_linear_kernels(policy))
    for a, b in zip(plain, eager, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("rows", [2, 5, 16, 48, 64])
def test_small_m_matches_torch(cuda, rows):
    """Each projection on the small-M kernel matches the reference norm around
    ``F.linear`` and the reference epilogue within bf16 tolerance."""
    from eagle_hal.ops import reference_model as reference
    from eagle_hal.ops.triton import fused_linear as fl
    from eagle_hal.ops.triton.fused_linear_config import small_m_launch

    w = layer(cuda, rows, seed=1)
    tol = dict(atol=3e-2, rtol=3e-2)
    with torch.inference_mode():
        config = small_m_launch(rows, HIDDEN, True)
        activated, stream = fl.gate_up_silu(w["x"], w["residual"], w["norm2"], 1e-5,
                                            w["gate_up"], config=config)
        normed, total = reference.add_rms_norm(w["x"], w["residual"], w["norm2"], 1e-5)
        expected = reference.silu_mul(F.linear(normed, w["gate_up"]))
        torch.testing.assert_close(activated.float(), expected.float(), **tol)
        assert torch.equal(stream, total)
        q, k, v, _ = fl.qkv_rotary(w["x"], w["residual"], w["norm1"], 1e-5, w["qkv"], None,
                                   w["cos"], w["sin"], HEADS, KV_HEADS, config=config)
        normed, _ = reference.add_rms_norm(w["x"], w["residual"], w["norm1"], 1e-5)
        eq, ek, ev = F.linear(normed, w["qkv"]).split(
            [HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1)
        eq, ek = reference.rotary(eq.reshape(rows, HEADS, HEAD_DIM),
                                  ek.reshape(rows, KV_HEADS, HEAD_DIM), w["cos"], w["sin"])
        for got, want in ((q, eq), (k, ek), (v, ev.reshape(rows, KV_HEADS, HEAD_DIM))):
            torch.testing.assert_close(got.float(), want.float(), **tol)
        activated = activated.contiguous()
        down = fl.linear(activated, w["down"], None, w["x"],
                         config=small_m_launch(rows, INTER, False))
        torch.testing.assert_close(down.float(), (w["x"] + F.linear(activated, w["down"]))
                                   .float(), **tol)
