"""The ROCm backend's device-neutral path on the CPU: the shared Triton kernels (under
TRITON_INTERPRET=1) launched with CDNA parameters, against brute-force oracles and plain
decoding. On the GPU, the same checks run through test_gpu_shared_path.py."""

from __future__ import annotations

import os

import pytest
import torch
from eagle_hal.device import parse_device
from eagle_hal_rocm.backend import RocmBackend
from eagle_hal_rocm.plugin import DESCRIPTOR

needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on the CPU"
)


def first_argmax(row: list[float]) -> int:
    best = 0
    for i, x in enumerate(row):
        if x > row[best]:
            best = i
    return best


@needs_interpreter
@pytest.mark.parametrize("wavefront", [64, 32])
def test_masked_split_vocab_argmax_never_reads_the_tail(wavefront):
    """Logits padded past vocab_size with +inf / huge values: the argmax is over the first
    vocab_size columns only (oracle: a Python loop), split over several vocabulary chunks."""
    backend = RocmBackend(DESCRIPTOR, parse_device("cpu"), wavefront_size=wavefront)
    ops = backend.sampling_ops()
    assert type(ops).__name__ == "TritonSamplingOps" and ops.num_warps == 256 // wavefront
    torch.manual_seed(0)
    vocab, padded = 33_001, 33_024  # three 16384-wide chunks, a ragged last block
    logits = torch.randn(3, padded)
    logits[0, vocab:] = float("inf")
    logits[1, vocab:] = 1e30
    logits[2, vocab - 1] = 50.0  # the maximum is the last real column
    logits[2, vocab:] = 51.0
    got = ops.masked_argmax(logits, vocab).tolist()
    assert got == [first_argmax(row[:vocab]) for row in logits.tolist()]
    assert got[2] == vocab - 1


@needs_interpreter
@pytest.mark.slow
def test_end_to_end_generation_equals_plain_decoding():
    """EAGLE through the ROCm backend's shared Triton path (CPU, interpreted) emits plain
    greedy decoding's tokens (oracle: the CPU reference backend without a draft)."""
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.registry import select_backend
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.testing.models import matching_eagle1, near_bigram_target

    target = near_bigram_target(seed=5)
    head = matching_eagle1(target, noise=0.02)
    prompts = [[1, 2, 3, 4, 5], [42, 7]]
    params = SamplingParams(max_new_tokens=8)
    expected = LLM.from_models(select_backend("cpu"), target, None,
                               spec=SpecConfig(num_steps=0)).generate(prompts, params)
    rocm = RocmBackend(DESCRIPTOR, parse_device("cpu"))
    llm = LLM.from_models(rocm, target, head, spec=SpecConfig(2, 2, 4), page_size=16,
                          max_batch_size=4, kv_cache_tokens=512)
    assert type(llm.runner.target_attn).__name__ == "TritonAttentionBackend"
    outputs = llm.generate(prompts, params)
    assert [o.token_ids for o in outputs] == [e.token_ids for e in expected]


def test_without_interpreter_off_gpu_it_falls_back(monkeypatch):
    """Bound to the CPU without TRITON_INTERPRET, the pure-torch paths are used and the
    capabilities say so."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    backend = RocmBackend(DESCRIPTOR, parse_device("cpu"))
    assert type(backend.sampling_ops()).__name__ == "ReferenceSamplingOps"
    assert backend.model_kernels().name == "reference"
    assert not backend.capabilities.triton and backend.graph_capture() is None
