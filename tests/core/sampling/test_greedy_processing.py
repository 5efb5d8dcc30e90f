"""Greedy speculative decoding with logit bias and penalties emits plain decoding's tokens.

At temperature 0 the output is a function of the processed logits alone, so chain, tree
and adaptive speculation must reproduce plain decoding token for token (float32, CPU),
each verify node processed with the drafted tokens of its own path. Plain decoding itself
is checked against an independent float64 greedy decode with HF transformers' logits and
the processing written out (``sampling_oracle``).
"""

from __future__ import annotations

import dataclasses

import pytest
import sampling_oracle as oracle
import torch
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

TOKENS = 20
PROMPTS = [[1, 2, 3, 4], [5, 6, 7], [9, 9, 9, 2, 11], [30]]

PARAMS = {
    "presence": SamplingParams(presence_penalty=1.5),
    "frequency": SamplingParams(frequency_penalty=0.9),
    "repetition": SamplingParams(repetition_penalty=2.5),
    "negative_presence": SamplingParams(presence_penalty=-2.0),
    "logit_bias": SamplingParams(logit_bias={3: 6.0, 26: -100, 11: 2.0}),
    "all": SamplingParams(presence_penalty=0.7, frequency_penalty=0.4, repetition_penalty=1.6,
                          logit_bias={20: -100, 55: 3.0}),
}

SPECS = {
    "chain": SpecConfig(num_steps=3, topk=1),
    "tree": SpecConfig(num_steps=3, topk=2, num_draft_tokens=6),
    "adaptive": SpecConfig(num_steps=4, topk=2, num_draft_tokens=6, adaptive=True,
                           adaptive_steps=(0, 2, 4)),
}


@pytest.fixture(scope="module")
def models():
    target = near_bigram_target(seed=5)
    return select_backend("cpu"), target, matching_eagle1(target, noise=0.02)


@pytest.fixture(scope="module")
def plain(models):
    backend, target, _ = models
    return LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0))


def _budget(params: SamplingParams) -> SamplingParams:
    return dataclasses.replace(params, max_tokens=TOKENS, ignore_eos=True)


def _ids(llm: LLM, params: SamplingParams) -> list[tuple[int, ...]]:
    return [o.token_ids for o in llm.generate(PROMPTS, _budget(params))]


@pytest.fixture(scope="module")
def expected(plain):
    """Plain decoding's tokens for every case; each case changes them (else it tests
    nothing)."""
    unprocessed = _ids(plain, SamplingParams())
    tokens = {name: _ids(plain, params) for name, params in PARAMS.items()}
    for name, ids in tokens.items():
        assert ids != unprocessed, f"{name} changes nothing: the case tests nothing"
    return tokens


@pytest.mark.parametrize("spec_name", list(SPECS))
def test_speculation_emits_plain_decodings_tokens(models, expected, spec_name):
    backend, target, head = models
    llm = LLM.from_models(backend, target, head, spec=SPECS[spec_name], seed=3)
    accepted = []
    for name, params in PARAMS.items():
        outputs = llm.generate(PROMPTS, _budget(params))
        got = [o.token_ids for o in outputs]
        assert got == expected[name], f"{name}/{spec_name}"
        accepted.append(sum(o.accept_length for o in outputs) / len(outputs))
    assert max(accepted) > 1.5  # drafts were accepted: the per-node processing was used


def test_a_mixed_batch_keeps_each_requests_tokens(models, plain):
    """Requests with and without processing in one batch, each as it decodes alone."""
    backend, target, head = models
    llm = LLM.from_models(backend, target, head, spec=SPECS["tree"], seed=3)
    params = [SamplingParams(max_tokens=TOKENS, ignore_eos=True),
              SamplingParams(max_tokens=TOKENS, ignore_eos=True, repetition_penalty=2.0),
              SamplingParams(max_tokens=TOKENS, ignore_eos=True, temperature=0.0,
                             logit_bias={3: 5.0}),
              SamplingParams(max_tokens=TOKENS, ignore_eos=True, frequency_penalty=1.0)]
    together = [o.token_ids for o in llm.generate(PROMPTS, params)]
    alone = [plain.generate([prompt], p)[0].token_ids
             for prompt, p in zip(PROMPTS, params, strict=True)]
    assert together == alone


def _oracle_greedy(hf, prompt: list[int], params: SamplingParams) -> tuple[int, ...]:
    output: list[int] = []
    for _ in range(TOKENS):
        with torch.no_grad():
            row = hf(torch.tensor([prompt + output])).logits[0, -1].tolist()
        logits = oracle.processed_logits(row, prompt, output, params)
        ranked = sorted(logits, reverse=True)
        assert ranked[0] - ranked[1] > 1e-4, "a near tie: float32 may break it either way"
        output.append(logits.index(ranked[0]))
    return tuple(output)


@pytest.mark.parametrize("name", ["presence", "repetition", "logit_bias", "all"])
def test_plain_decoding_follows_the_oracle(models, expected, name):
    _, target, _ = models
    hf = oracle.hf_copy(target)
    params = PARAMS[name]
    for prompt, ids in zip(PROMPTS[:2], expected[name], strict=False):
        assert ids == _oracle_greedy(hf, prompt, params)


@pytest.mark.parametrize("spec_name", ["chain", "tree"])
def test_overlap_on_takes_the_eager_iteration_for_processed_batches(models, expected,
                                                                    spec_name):
    """With overlap on, a batch with a bias or a penalty still emits plain decoding's
    tokens: the worker runs it eagerly (an overlapped launch would process no node)."""
    backend, target, head = models
    llm = LLM.from_models(backend, target, head, spec=SPECS[spec_name], seed=3)
    llm.worker.overlap = True
    for name in ("repetition", "all"):
        assert _ids(llm, PARAMS[name]) == expected[name], name
    assert llm.worker.speculative.in_flight is None and llm.worker.plain.in_flight is None
