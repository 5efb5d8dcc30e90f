"""Speculative decoding with logit bias, penalties, min-p and top-k/top-p samples exactly
what plain decoding samples.

On a near-bigram target with an 8-token vocabulary, drafted by a head that guesses it
well (so that drafted paths are accepted often: the per-node processing is what decides
the law of the later positions), the joint law of the first three output tokens is
worked out exactly (every sequence) in float64 from HF transformers' logits on the same
weights, with the processing written out token by token (``sampling_oracle``). A penalty
at position 3 depends on the tokens at positions 1 and 2, which speculation drafts and
verifies in one pass: the law is only right if each verify node is processed with the
tokens of its own path. The engine's samples (chain and tree) are compared with a
chi-square test, false-failure rate ALPHA = 1e-4 per case (fixed seeds: deterministic). A
control shows the test rejects the law without the penalty.
"""

from __future__ import annotations

import dataclasses

import pytest
import sampling_oracle as oracle
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

ALPHA = 1e-4
VOCAB = 8
LENGTH = 3
SAMPLES = 1200
BATCH = 256  # requests per batch: few iterations, each over many samples
PROMPT = [4, 4, 4]  # few prompt tokens: the output's own repeats decide the penalties

SPECS = {
    "chain": SpecConfig(num_steps=3, topk=1),
    "tree": SpecConfig(num_steps=2, topk=2, num_draft_tokens=5),
}

PARAMS = {
    "presence": SamplingParams(temperature=0.9, presence_penalty=2.0, max_tokens=LENGTH),
    "frequency": SamplingParams(temperature=1.0, frequency_penalty=1.5, max_tokens=LENGTH),
    "repetition": SamplingParams(temperature=0.8, repetition_penalty=3.0, max_tokens=LENGTH),
    "min_p": SamplingParams(temperature=1.3, min_p=0.2, max_tokens=LENGTH),
    "top_k_top_p": SamplingParams(temperature=1.2, top_k=4, top_p=0.85, max_tokens=LENGTH),
    "logit_bias": SamplingParams(temperature=1.0, logit_bias={3: 2.5, 6: -100, 0: 1.0},
                                 max_tokens=LENGTH),
    "all": SamplingParams(temperature=1.1, presence_penalty=0.8, frequency_penalty=0.6,
                          repetition_penalty=1.7, logit_bias={4: 1.5}, min_p=0.05, top_k=6,
                          max_tokens=LENGTH),
}


@pytest.fixture(scope="module")
def setup():
    target = near_bigram_target(seed=5, vocab=VOCAB)
    head = matching_eagle1(target, noise=0.02)
    return select_backend("cpu"), target, head, oracle.hf_copy(target)


def sample(llm: LLM, params: SamplingParams) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for output in llm.generate([PROMPT] * SAMPLES, params):
        key = tuple(output.token_ids[:LENGTH])
        assert len(key) == LENGTH
        counts[key] = counts.get(key, 0) + 1
    assert llm.used_pages == 0
    return counts


@pytest.mark.parametrize("spec_name", list(SPECS))
@pytest.mark.parametrize("name", list(PARAMS))
def test_the_joint_law_is_plain_samplings(setup, name, spec_name):
    backend, target, head, hf = setup
    params = PARAMS[name]
    llm = LLM.from_models(backend, target, head, spec=SPECS[spec_name], seed=31,
                          max_batch_size=BATCH, kv_cache_tokens=BATCH * 24)
    counts = sample(llm, params)
    probs = oracle.joint_law(hf, PROMPT, params, LENGTH)
    p_value = oracle.chi_square_p_value(counts, probs, SAMPLES)
    assert p_value > ALPHA, f"{name}/{spec_name}: chi-square p = {p_value:.2e}"
    # drafts were really accepted (the law of an accepted path is what is under test)
    outputs = llm.generate([PROMPT] * 16, dataclasses.replace(params, max_tokens=12))
    assert sum(o.accept_length for o in outputs) / len(outputs) > 1.05


def test_the_statistic_rejects_the_law_without_the_penalty(setup):
    """Control: against the law without the presence penalty the engine's samples fail, so
    the test sees a penalty's effect at this sample size."""
    backend, target, head, hf = setup
    params = PARAMS["presence"]
    llm = LLM.from_models(backend, target, head, spec=SPECS["tree"], seed=31,
                          max_batch_size=BATCH, kv_cache_tokens=BATCH * 24)
    counts = sample(llm, params)
    wrong = oracle.joint_law(hf, PROMPT, dataclasses.replace(params, presence_penalty=0.0),
                             LENGTH)
    assert oracle.chi_square_p_value(counts, wrong, SAMPLES) < ALPHA


def test_the_oracle_laws_sum_to_one(setup):
    *_, hf = setup
    for params in PARAMS.values():
        probs = oracle.joint_law(hf, PROMPT, params, LENGTH)
        assert abs(sum(probs.values()) - 1.0) < 1e-9
