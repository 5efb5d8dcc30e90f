"""At the end of the context speculation shrinks its tree instead of stopping early.

A request finishes with ``FinishReason.CONTEXT_FULL`` once it holds ``max_context`` tokens,
whatever the decoding mode. The oracle is plain greedy decoding of the same float32 model
with a context large enough never to fill, cut to the positions the small context holds:
chain, tree and adaptive speculation, with and without an iteration in flight, alone and
in batches whose requests reach the end at different steps, must emit exactly that.
"""

from __future__ import annotations

import pytest
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import FinishReason, SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9], [3, 2], [3, 8, 4, 6, 2, 6, 4, 3]]
SPECS = {
    "chain": SpecConfig(num_steps=5, topk=1),
    "tree": SpecConfig(num_steps=4, topk=2, num_draft_tokens=8),
    "adaptive": SpecConfig(num_steps=3, topk=2, num_draft_tokens=8, adaptive=True,
                           adaptive_steps=(0, 1, 3, 5)),
}


@pytest.fixture(scope="module")
def backend():
    return select_backend("cpu")


@pytest.fixture(scope="module")
def models():
    target = near_bigram_target(seed=5)
    # a near-exact head: long accepted paths, so that paths run past the context's end
    return target, matching_eagle1(target, noise=0.02)


@pytest.fixture(scope="module")
def unlimited(backend, models):
    """Plain decoding with room to spare: each prompt's first 80 tokens."""
    llm = LLM.from_models(backend, models[0], None, max_context=512)
    out = llm.generate(PROMPTS, SamplingParams(max_new_tokens=80, ignore_eos=True))
    return [list(o.token_ids) for o in out]


@pytest.mark.parametrize("overlap", [False, True], ids=["eager", "overlap"])
@pytest.mark.parametrize("mode", ["plain", *SPECS])
@pytest.mark.parametrize("max_context", [24, 31])
def test_speculation_fills_the_context_as_plain_decoding(backend, models, unlimited, mode,
                                                         overlap, max_context):
    target, head = models
    spec = SPECS.get(mode, SpecConfig(num_steps=5, topk=1))
    llm = LLM.from_models(backend, target, None if mode == "plain" else head, None, spec,
                          max_context=max_context, seed=0)
    llm.worker.overlap = overlap
    out = llm.generate(PROMPTS, SamplingParams(max_new_tokens=200, ignore_eos=True))
    for prompt, o, expected in zip(PROMPTS, out, unlimited, strict=True):
        assert o.finish_reason is FinishReason.CONTEXT_FULL
        assert list(o.token_ids) == expected[: max_context - len(prompt)]
    if mode != "plain":
        # paths long enough to have run past the end had the tree not shrunk
        assert max(o.accept_length for o in out) > 2.0
    assert llm.used_pages == 0 and llm.leaked_pages == 0


@pytest.mark.parametrize("mode", list(SPECS))
def test_a_prompt_one_short_of_the_context_gets_its_one_token(backend, models, unlimited,
                                                              mode):
    target, head = models
    prompt = PROMPTS[2]
    llm = LLM.from_models(backend, target, head, None, SPECS[mode], max_context=len(prompt) + 1)
    (o,) = llm.generate([prompt], SamplingParams(max_new_tokens=10, ignore_eos=True))
    assert o.finish_reason is FinishReason.CONTEXT_FULL
    assert list(o.token_ids) == unlimited[2][:1]
    assert llm.used_pages == 0


def test_the_token_budget_ending_first_is_length(backend, models, unlimited):
    """Both limits at the same token: the budget's reason wins (its check runs first)."""
    target, head = models
    prompt = PROMPTS[0]
    llm = LLM.from_models(backend, target, head, None, SPECS["chain"], max_context=30)
    (o,) = llm.generate([prompt], SamplingParams(max_new_tokens=30 - len(prompt),
                                                 ignore_eos=True))
    assert o.finish_reason is FinishReason.LENGTH
    assert list(o.token_ids) == unlimited[0][: 30 - len(prompt)]
