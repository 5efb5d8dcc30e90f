"""The n-gram drafter through the verify path is lossless.

Greedy: token for token what plain decoding emits (float32, CPU), for batches mixing
requests whose tokens repeat (proposals, accepted) with one that proposes nothing in the
same iterations (a one-node step beside the others' trees). At temperature > 0: the
chi-square test of ``test_lossless_sampling`` against the exact distribution enumerated
with HF transformers.
"""

from __future__ import annotations

import pytest
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.errors import InvalidArgument
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.drafter import Proposal
from eagle_hal.speculative.ngram import NgramDrafter
from eagle_hal.testing.models import near_bigram_target, tiny_target


class Recording(NgramDrafter):
    """The n-gram drafter, keeping every batch's proposals by request id."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[dict[int, Proposal]] = []

    def propose(self, request_ids, tokens, shape):
        proposals = super().propose(request_ids, tokens, shape)
        self.batches.append(dict(zip(request_ids, proposals, strict=True)))
        return proposals


@pytest.fixture(scope="module")
def backend():
    return select_backend("cpu")


REPEATS = [[5, 9, 13, 2, 7, 5, 9, 13, 2, 7, 5, 9], [3, 4, 3, 4, 3, 4, 3], [11, 12, 13, 14]]


def plain(backend, target, prompts, params):
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0), max_batch_size=8)
    return [o.token_ids for o in llm.generate(prompts, params)]


@pytest.mark.parametrize("spec, ngram", [
    (SpecConfig(4), (3, 1)),
    (SpecConfig(3, 2, 7), (3, 2)),
    (SpecConfig(5, 3, 12), (2, 3)),
], ids=["chain", "tree-k2", "tree-k3"])
def test_greedy_equals_plain_decoding(backend, spec, ngram):
    target = near_bigram_target(seed=5)
    params = SamplingParams(temperature=0.0, max_tokens=40)
    drafter = Recording(*ngram)
    llm = LLM.from_models(backend, target, None, spec=spec, max_batch_size=8, drafter=drafter)
    outputs = llm.generate(REPEATS, params)
    assert [o.token_ids for o in outputs] == plain(backend, target, REPEATS, params)
    assert sum(o.accept_length for o in outputs) / len(outputs) > 1.2
    assert llm.leaked_pages == 0
    # the drafter really proposed trees within the shape, and (for the chain) some
    # iteration verified one request's proposal beside another's empty one
    proposed = [p for batch in drafter.batches for p in batch.values() if p.tokens]
    assert proposed and all(p.depth <= spec.num_steps for p in proposed)
    assert all(len(p.tokens) <= spec.draft_tokens - 1 for p in proposed)
    assert not drafter._indexes  # released when the requests finished


def test_a_request_that_never_matches_decodes_beside_proposing_ones(backend):
    """A random target on distinct prompt tokens: request 0's tokens repeat, request 1
    is given a prompt of tokens that never come back within its few steps; the batch's
    iterations mix a tree with a one-node step."""
    target = tiny_target(seed=3)
    prompts = [[8, 1, 2, 3, 8, 1, 2, 3, 8, 1], [40, 41, 42, 43, 44, 45], [60, 61, 60, 61, 60]]
    params = SamplingParams(temperature=0.0, max_tokens=24)
    drafter = Recording(3, 2)
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(3, 2, 7), max_batch_size=8,
                          drafter=drafter)
    got = [o.token_ids for o in llm.generate(prompts, params)]
    assert got == plain(backend, target, prompts, params)
    mixed = [b for b in drafter.batches if len(b) > 1 and any(p.tokens for p in b.values())
             and any(not p.tokens for p in b.values())]
    assert mixed, "no iteration verified a proposal beside an empty one"


def test_penalties_and_logprobs_through_ngram_trees(backend):
    """The logits stage runs per tree node along its own path: a repetition penalty (which
    counts each node's ancestors) and logprobs give what plain decoding gives."""
    target = near_bigram_target(seed=5)
    params = SamplingParams(temperature=0.0, max_tokens=30, repetition_penalty=1.3,
                            logprobs=2)
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(3, 2, 7), max_batch_size=8,
                          drafter=NgramDrafter(3, 2))
    got = llm.generate(REPEATS, params)
    reference = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0),
                                max_batch_size=8).generate(REPEATS, params)
    assert [o.token_ids for o in got] == [o.token_ids for o in reference]
    for a, b in zip(got, reference, strict=True):
        assert len(a.logprobs) == len(b.logprobs) == len(a.token_ids)
        for x, y in zip(a.logprobs, b.logprobs, strict=True):
            assert abs(x.logprob - y.logprob) < 1e-4
            assert [t for t, _ in x.top] == [t for t, _ in y.top]
    assert sum(o.accept_length for o in got) / len(got) > 1.0


def test_a_batch_proposing_nothing_is_plain_decoding(backend):
    target = tiny_target(seed=4)
    prompts = [[1, 2, 3], [4, 5, 6, 7]]
    params = SamplingParams(temperature=0.0, max_tokens=1)
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(3), drafter=NgramDrafter())
    assert [o.token_ids for o in llm.generate(prompts, params)] == plain(backend, target,
                                                                         prompts, params)


def test_adaptive_controller_over_ngram(backend):
    target = near_bigram_target(seed=5)
    params = SamplingParams(temperature=0.0, max_tokens=40)
    spec = SpecConfig(3, adaptive=True, adaptive_steps=(0, 2, 4))
    llm = LLM.from_models(backend, target, None, spec=spec, max_batch_size=8,
                          drafter=NgramDrafter(3, 1))
    assert llm.worker.controller is not None
    outputs = llm.generate(REPEATS, params)
    assert [o.token_ids for o in outputs] == plain(backend, target, REPEATS, params)


@pytest.mark.parametrize("draft", ["ngram:0", "ngram:2,x", "ngram:3,2,1"])
def test_llm_refuses_a_bad_ngram_draft(draft):
    with pytest.raises(InvalidArgument) as caught:
        LLM(draft=draft, device="cpu", progress=False)
    assert caught.value.name == "draft"


# -- temperature > 0: the law of the emitted tokens ------------------------------------------

def test_sampling_matches_the_target_distribution(backend, monkeypatch):
    pytest.importorskip("transformers")
    import test_lossless_sampling as law

    # a prompt whose repeats continue in several ways: trees with siblings to verify
    monkeypatch.setattr(law, "PROMPT", [1, 5, 2, 1, 5, 7, 1, 5, 2, 1, 5, 3, 6, 1])

    target = tiny_target(seed=11, vocab=law.VOCAB)
    hf = law.hf_copy(target)
    params = SamplingParams(temperature=0.9, max_tokens=law.LENGTH)
    drafter = Recording(2, 2)
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(2, 2, 5), seed=2024,
                          max_batch_size=64, drafter=drafter)
    counts = law.sample(llm, params)
    p_value = law.chi_square_p_value(counts, law.exact_distribution(hf, params), law.SAMPLES)
    assert p_value > law.ALPHA, f"chi-square p = {p_value:.2e}"
    # the drafter's trees were really verified: accepted and rejected ones, siblings included
    assert any(len(set(p.parents)) < len(p.parents) for b in drafter.batches
               for p in b.values())
    longer = SamplingParams(temperature=params.temperature, max_tokens=16)
    outputs = llm.generate([law.PROMPT] * 64, longer)
    mean_accept = sum(o.accept_length for o in outputs) / len(outputs)
    assert 1.05 < mean_accept < 3
