"""The ROCm backend's shared Triton path forced onto whatever GPU torch calls "cuda".

On an NVIDIA GPU this exercises the ROCm backend's own classes (wavefront-derived launch
parameters forced to CDNA's 64, HIP-graph capture through the CUDA-graph API, the shared
Triton attention and sampling kernels) on a CUDA build: it says nothing about AMD
hardware. Oracles: brute-force argmax, eager replay, plain decoding on the same backend,
and the conformance suite's own oracles. Skipped cleanly without a GPU.

    pytest -p no:cacheprovider tests/backends/rocm/test_gpu_shared_path.py -m gpu
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.device import parse_device
from eagle_hal_rocm.backend import RocmBackend
from eagle_hal_rocm.plugin import DESCRIPTOR

pytestmark = pytest.mark.gpu

CONFORMANCE_AREAS = ("sampling", "attention", "kv", "graphs", "end_to_end")


@pytest.fixture(scope="module")
def rocm_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no GPU under torch's 'cuda' device type")
    return RocmBackend(DESCRIPTOR, parse_device("cuda:0"), wavefront_size=64)


def test_cdna_launch_parameters_and_masked_argmax(rocm_on_gpu):
    """num_warps 4 (64-lane wavefronts); the vocabulary tail is never read."""
    ops = rocm_on_gpu.sampling_ops()
    assert ops.num_warps == 4
    torch.manual_seed(0)
    vocab = 151_937
    logits = torch.randn(8, vocab + 127, device="cuda")
    logits[:, vocab:] = float("inf")
    got = ops.masked_argmax(logits, vocab)
    assert torch.equal(got, logits[:, :vocab].argmax(-1))


def test_hip_graph_capture_replays(rocm_on_gpu):
    """A captured computation replays over new inputs exactly as eager."""
    capture = rocm_on_gpu.graph_capture()
    static_in = torch.zeros(1024, device="cuda")
    graph = capture.new_graph()
    with capture.warmup():
        static_out = static_in * 2 + 1
    with capture.capture(graph):
        static_out = static_in * 2 + 1
    fresh = torch.randn(1024, device="cuda")
    static_in.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, fresh * 2 + 1)


@pytest.mark.parametrize("graphs", [False, True])
def test_speculation_is_lossless(rocm_on_gpu, graphs):
    """EAGLE through the ROCm classes on the GPU equals plain decoding on the same backend."""
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.testing.models import matching_eagle1, near_bigram_target

    target = near_bigram_target(seed=5, device=rocm_on_gpu.torch_device)
    head = matching_eagle1(target, noise=0.02)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9], list(range(10, 40)), [42]]
    params = SamplingParams(max_new_tokens=24)
    plain = LLM.from_models(rocm_on_gpu, target, None, spec=SpecConfig(num_steps=0))
    expected = [o.token_ids for o in plain.generate(prompts, params)]
    llm = LLM.from_models(rocm_on_gpu, target, head, spec=SpecConfig(3, 2, 6), seed=0)
    if graphs:
        assert llm.runner.enable_graphs()
    assert [o.token_ids for o in llm.generate(prompts, params)] == expected


def test_conformance_through_the_shared_path(rocm_on_gpu):
    """The conformance suite's device areas pass for the ROCm classes on the GPU (discovery
    is left out: on a CUDA build the rocm probe rightly says unavailable)."""
    from eagle_hal.conformance import run_suite

    report = run_suite("cuda:0", backend=rocm_on_gpu, areas=CONFORMANCE_AREAS, quiet=False)
    for area in report.areas:
        print(area, report.area_status(area), report.counts(area))
    failures = [r for r in report.results if r.outcome.value in ("fail", "unexpected-pass")]
    assert not failures, failures
