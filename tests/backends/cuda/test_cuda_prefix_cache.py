"""Prefix caching and head-less drafting on a real GPU, with CUDA graphs.

Oracles: the same engine with the prefix cache off (every prompt computed from scratch),
and greedy plain decoding of the same float32 target. A wrong cached draft K/V shows in the
accepted tokens and verify steps of the fixed-depth modes even where the tokens agree, so
those are compared too. Skipped cleanly where no CUDA device is visible.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.ngram import NgramDrafter
from eagle_hal.testing.models import matching_eagle1, near_bigram_target
from prefix_workloads import conversation, shared_prefix, summary

pytestmark = pytest.mark.gpu

MODES = {
    "chain": SpecConfig(3, 1, 4),
    "tree": SpecConfig(3, 2, 6),
    "adaptive": SpecConfig(3, adaptive=True),
    "plain": None,
}
GREEDY = SamplingParams(max_tokens=12, ignore_eos=True)
SEEDED = SamplingParams(max_tokens=12, ignore_eos=True, temperature=0.9, seed=11)


@pytest.fixture(scope="module")
def pair(cuda_backend):
    target = near_bigram_target(seed=5, device=cuda_backend.torch_device)
    head = matching_eagle1(target, noise=0.02)
    with torch.no_grad():  # give the draft's attention a say (see the CPU engine tests)
        o_proj = head.layers[0].self_attn.o_proj.weight
        o_proj.copy_(0.3 * torch.randn(o_proj.shape, generator=torch.Generator().manual_seed(4))
                     .to(o_proj.device))
    return target, head


def make(backend, pair, mode, page_size, cache):
    target, head = pair
    spec = MODES[mode]
    llm = LLM.from_models(backend, target, head if spec else None, None,
                          spec or SpecConfig(num_steps=0), page_size=page_size, seed=0,
                          max_batch_size=4, enable_prefix_caching=cache)
    assert llm.runner.enable_graphs()
    return llm


# adaptive depths follow measured time, and a seeded sample path follows the tree it
# verifies (its law does not): greedy tokens only there
CASES = [(m, p) for m in MODES for p in (GREEDY, SEEDED) if m != "adaptive" or p is GREEDY]


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize(("mode", "params"), CASES,
                         ids=[f"{m}-{'greedy' if p is GREEDY else 'seeded'}" for m, p in CASES])
def test_prefix_cache_with_graphs_matches_the_uncached_engine(cuda_backend, pair, mode,
                                                              page_size, params):
    results = {}
    for cache in (False, True):
        llm = make(cuda_backend, pair, mode, page_size, cache)
        results[cache] = (conversation(llm, params, turns=4), shared_prefix(llm, params))
        assert llm.used_pages == 0 and llm.leaked_pages == 0
        if cache:
            assert llm.prefix_cache_stats["cached_tokens"] > 0
    (turns_off, batch_off), (turns_on, batch_on) = results[False], results[True]
    if mode == "adaptive":
        tokens = lambda outs: [list(o.token_ids) for o in outs]  # noqa: E731
        assert tokens(turns_on) == tokens(turns_off) and tokens(batch_on) == tokens(batch_off)
    else:
        assert summary(turns_on) == summary(turns_off)
        assert summary(batch_on) == summary(batch_off)


@pytest.mark.parametrize("spec, ngram", [(SpecConfig(4), (3, 1)), (SpecConfig(3, 2, 7), (3, 2))],
                         ids=["chain", "tree"])
def test_ngram_drafting_with_graphs_equals_plain_decoding(cuda_backend, pair, spec, ngram):
    target = pair[0]
    prompts = [[5, 9, 13, 2, 7, 5, 9, 13, 2, 7, 5, 9], [3, 4, 3, 4, 3, 4, 3], [11, 12, 13, 14]]
    params = SamplingParams(max_tokens=40, ignore_eos=True)
    plain = LLM.from_models(cuda_backend, target, None, spec=SpecConfig(num_steps=0),
                            max_batch_size=8)
    expected = [o.token_ids for o in plain.generate(prompts, params)]
    llm = LLM.from_models(cuda_backend, target, None, spec=spec, max_batch_size=8,
                          drafter=NgramDrafter(*ngram))
    assert llm.runner.enable_graphs()
    outputs = llm.generate(prompts, params)
    assert [o.token_ids for o in outputs] == expected
    assert sum(o.accept_length for o in outputs) / len(outputs) > 1.2
    assert llm.leaked_pages == 0
