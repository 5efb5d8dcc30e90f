"""The graph runner: bucketing, padding, slicing back and eager fallback, on CPU.

Oracle: greedy plain decoding of the same target through the eager CPU reference backend
(pure-torch attention, no graphs). The backends under test capture with the strict
``EmulatedGraphCapture`` (``eagle_hal.testing.graphs``): a replay re-runs a snapshot of the
captured forward, so it sees the static buffers' in-place updates and nothing else, as a
device graph does; the padding, static-buffer and slicing logic is exercised exactly. Their
attention is the Triton backend (interpreted; slow, so one test) or the pure-torch one with
its own graph hooks. Real capture is in tests/backends/cuda.
"""

from __future__ import annotations

import pytest
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.backends.cpu.backend import CpuBackend
from eagle_hal.engine.request import SamplingParams
from eagle_hal.spec.config import SpecConfig
from eagle_hal.testing.graphs import EmulatedGraphCapture
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

pytest.importorskip("triton")

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], list(range(10, 30))]
PARAMS = SamplingParams(max_new_tokens=6)


class TritonCpuBackend(CpuBackend):
    """The CPU backend with the Triton attention (interpreted) and replaying graphs."""

    def create_attention_backend(self, config):
        from eagle_hal.ops.triton.attention import TritonAttentionBackend

        return TritonAttentionBackend(config)

    def graph_capture(self):
        return EmulatedGraphCapture()


class ReplayingTorchBackend(CpuBackend):
    """The CPU backend (reference attention) with emulated graphs."""

    def graph_capture(self):
        return EmulatedGraphCapture()


@pytest.fixture(scope="module")
def backends():
    reference = select_backend("cpu")
    return (
        reference,
        TritonCpuBackend(reference.descriptor, reference.device_spec),
        ReplayingTorchBackend(reference.descriptor, reference.device_spec),
    )


@pytest.fixture(scope="module")
def pair():
    target = near_bigram_target(seed=5)
    return target, matching_eagle1(target, noise=0.02)


def plain(backend, target, prompts):
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0), seed=0)
    return [o.token_ids for o in llm.generate(prompts, PARAMS)]


def test_bucket_is_the_smallest_that_fits(backends, pair):
    """A batch runs in the smallest bucket >= its size; beyond the largest, none."""
    llm = LLM.from_models(backends[1], pair[0], None, spec=SpecConfig(num_steps=0))
    assert llm.runner.enable_graphs((4, 1, 2))
    graphs = llm.runner.graphs
    assert [graphs.bucket_for(b) for b in (1, 2, 3, 4, 5)] == [1, 2, 4, 4, None]


def test_no_graphs_without_capture_or_replay_hooks(backends, pair):
    """The reference backend has no graph capture: eager."""
    llm = LLM.from_models(backends[0], pair[0], None, spec=SpecConfig(num_steps=0))
    assert not llm.runner.enable_graphs() and llm.runner.graphs is None


def test_plain_decoding_padded_to_a_bucket(backends, pair):
    """Three requests decode in bucket 4 (one padded request) through the Triton attention
    and equal eager decoding."""
    target = pair[0]
    expected = plain(backends[0], target, PROMPTS)
    llm = LLM.from_models(backends[1], target, None, spec=SpecConfig(num_steps=0), seed=0)
    llm.runner.enable_graphs((1, 4))
    assert [o.token_ids for o in llm.generate(PROMPTS, PARAMS)] == expected
    assert llm.runner.graphs.replays > 0 and llm.used_pages == 0


@pytest.mark.parametrize("topk,steps,nodes", [(1, 2, 3), (2, 2, 4)])
def test_speculative_decoding_with_graphs_is_lossless(backends, pair, topk, steps, nodes):
    """Chain and tree drafting with captured draft/verify/extend forwards equal plain
    decoding; batches of 1 and 3, a bucket too small for 3 (eager fallback)."""
    target, head = pair
    expected = plain(backends[0], target, PROMPTS)
    llm = LLM.from_models(backends[2], target, head, spec=SpecConfig(steps, topk, nodes), seed=0)
    llm.runner.enable_graphs((1, 2))
    got = [o.token_ids for o in llm.generate(PROMPTS, PARAMS)]  # batch 3: eager
    got_one = [o.token_ids for o in llm.generate(PROMPTS[:1], PARAMS)]  # batch 1: graphs
    assert got == expected and got_one == expected[:1]
    graphs = llm.runner.graphs
    modes = {key[1].value for key in graphs._graphs}
    assert {"target_verify", "draft_decode", "draft_extend"} <= modes
    assert llm.used_pages == 0
