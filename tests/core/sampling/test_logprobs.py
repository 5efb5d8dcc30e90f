"""Logprobs of the emitted tokens against an independent float64 computation.

Every output token's logprobs must be those of the distribution sampled at its position:
HF transformers' logits for the prompt and the output before it, then the logit bias,
penalties, temperature, top-k, top-p and min-p written out (``sampling_oracle``). Under
speculative decoding most tokens come from accepted draft nodes, so this checks that each
one is read from its own node's row, processed with its own path.
"""

from __future__ import annotations

import math

import pytest
import sampling_oracle as oracle
import torch
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import FinishReason, SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

VOCAB = 8
PROMPT = [4, 4, 1]
TOLERANCE = 2e-4  # float32 engine against float64 oracle, in log space


@pytest.fixture(scope="module")
def setup():
    target = near_bigram_target(seed=5, vocab=VOCAB)
    head = matching_eagle1(target, noise=0.02)
    backend = select_backend("cpu")
    tree = LLM.from_models(backend, target, head, spec=SpecConfig(3, 2, 6), seed=5)
    return tree, oracle.hf_copy(target)


def _expected(hf, ids: list[int], params: SamplingParams) -> list[list[float]]:
    """Per output position, the oracle's logprobs over the vocabulary."""
    with torch.no_grad():
        rows = hf(torch.tensor([PROMPT + ids])).logits[0, len(PROMPT) - 1 :].tolist()
    laws = []
    for j in range(len(ids)):
        if params.logprobs_mode == "raw":
            top = max(rows[j])
            total = math.log(sum(math.exp(v - top) for v in rows[j])) + top
            laws.append([v - total for v in rows[j]])
            continue
        logits = oracle.processed_logits(rows[j], PROMPT, ids[:j], params)
        dist, margin = oracle.law(logits, params, params.temperature or 1.0)
        assert margin > 1e-5
        laws.append([math.log(p) if p > 0 else -math.inf for p in dist])
    return laws


def _check(outputs, hf, params: SamplingParams) -> None:
    for output in outputs:
        ids = list(output.token_ids)
        assert output.logprobs is not None and len(output.logprobs) == len(ids)
        for j, (token, entry, law) in enumerate(
                zip(ids, output.logprobs, _expected(hf, ids, params), strict=True)):
            assert abs(entry.logprob - law[token]) < TOLERANCE, (j, entry, law)
            ranked = sorted((t for t in range(VOCAB) if law[t] > -math.inf),
                            key=lambda t: -law[t])[: params.logprobs]
            assert [t for t, _ in entry.top] == ranked, (j, entry.top, law)
            for t, value in entry.top:
                assert abs(value - law[t]) < TOLERANCE


CASES = {
    "processed": SamplingParams(temperature=0.8, presence_penalty=0.6, frequency_penalty=0.4,
                                repetition_penalty=1.4, logit_bias={2: 1.5}, top_k=6,
                                min_p=0.02, logprobs=4, max_tokens=10, ignore_eos=True),
    "processed_top_p": SamplingParams(temperature=1.2, top_p=0.9, logprobs=8, max_tokens=10,
                                      ignore_eos=True),
    "greedy": SamplingParams(temperature=0.0, repetition_penalty=2.0, top_k=5, logprobs=3,
                             max_tokens=10, ignore_eos=True),
    "raw": SamplingParams(temperature=0.9, presence_penalty=1.0, logit_bias={3: -5.0},
                          logprobs=2, logprobs_mode="raw", max_tokens=10, ignore_eos=True),
    "sampled_only": SamplingParams(temperature=0.7, logprobs=0, max_tokens=10,
                                   ignore_eos=True),
    # token 3's probability underflows float32 (about e^-200): its logprob stays finite
    "underflow": SamplingParams(temperature=0.5, logit_bias={3: -100.0}, logprobs=VOCAB,
                                max_tokens=10, ignore_eos=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_logprobs_are_the_sampled_distributions(setup, name):
    llm, hf = setup
    params = CASES[name]
    outputs = llm.generate([PROMPT] * 6, params)
    _check(outputs, hf, params)
    assert sum(o.accept_length for o in outputs) / len(outputs) > 1.3  # drafts accepted
    if params.logprobs == 0:
        assert all(entry.top == () for o in outputs for entry in o.logprobs)


def test_streamed_logprobs_follow_the_tokens(setup):
    """Deltas carry the logprobs of their own tokens; a stop token (not in the output)
    leaves none behind, so the entries stay aligned with the ids."""
    llm, hf = setup
    params = SamplingParams(temperature=1.0, logprobs=2, max_tokens=12, stop_token_ids=(7,))
    streamed: dict[int, list] = {}
    tokens: dict[int, list] = {}
    for delta in llm.stream([PROMPT] * 4, params):
        assert delta.logprobs is not None and len(delta.logprobs) == len(delta.token_ids)
        streamed.setdefault(delta.request_id, []).extend(delta.logprobs)
        tokens.setdefault(delta.request_id, []).extend(delta.token_ids)
    outputs = llm.last_outputs
    # the case under test happened: a request ended on the stop token
    assert any(o.finish_reason is FinishReason.STOP for o in outputs)
    assert sorted(len(v) for v in streamed.values()) == sorted(len(o.logprobs) for o in outputs)
    for output in outputs:
        assert list(output.logprobs) == streamed[output.request_id]
        assert list(output.token_ids) == tokens[output.request_id]
    _check(outputs, hf, params)


def test_no_logprobs_unless_asked(setup):
    llm, _ = setup
    output = llm.generate([PROMPT], SamplingParams(max_tokens=4))[0]
    assert output.logprobs is None
