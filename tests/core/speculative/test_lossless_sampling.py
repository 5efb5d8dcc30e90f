"""Lossless at temperature > 0: speculation does not change the output distribution.

On a target with an 8-token vocabulary, the joint distribution of the first three emitted
tokens is computed exactly (all 512 sequences) with HF transformers on the same weights,
with temperature / top-k / top-p applied in float64. The tokens sampled by the speculative
engine are compared to it with a chi-square goodness-of-fit test (cells pooled so that
every expected count is at least 5). The false-failure rate of each test is ALPHA = 1e-4
(the seeds are fixed, so a given checkout passes or fails deterministically). A control
with a deliberately wrong temperature shows the test has the power to fail.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import hf_float64_copy, tiny_eagle1, tiny_target

transformers = pytest.importorskip("transformers")

ALPHA = 1e-4
VOCAB = 8
LENGTH = 3
SAMPLES = 3000
PROMPT = [1, 5, 2, 7]


hf_copy = hf_float64_copy  # the float64 transformers oracle


def filtered(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The target distribution the sampler must reproduce (float64, brute force)."""
    probs = torch.softmax(logits / params.temperature, dim=-1)
    order = torch.argsort(probs, descending=True, stable=True).tolist()
    if params.top_k:
        order = order[: params.top_k]
    kept_mass = sum(probs[t].item() for t in order)  # top-p acts on the renormalised top-k
    keep = torch.zeros_like(probs, dtype=torch.bool)
    mass = 0.0
    for token in order:
        keep[token] = True
        mass += probs[token].item() / kept_mass
        if mass >= params.top_p:
            break
    probs = torch.where(keep, probs, 0.0)
    return probs / probs.sum()


def exact_distribution(hf, params: SamplingParams) -> dict[tuple[int, ...], float]:
    """P(first LENGTH tokens) by enumerating every sequence."""
    result = {(): 1.0}
    for _ in range(LENGTH):
        grown = {}
        prefixes = list(result)
        ids = torch.tensor([PROMPT + list(p) for p in prefixes])
        with torch.no_grad():
            last = hf(ids).logits[:, -1, :]
        for prefix, row in zip(prefixes, last, strict=True):
            dist = filtered(row, params)
            for token in range(VOCAB):
                grown[prefix + (token,)] = result[prefix] * dist[token].item()
        result = grown
    return result


def chi_square_p_value(counts: dict, probs: dict, n: int) -> float:
    cells = sorted(probs, key=lambda k: probs[k], reverse=True)
    observed, expected = [], []
    pool_o = pool_e = 0.0
    for cell in cells:
        e = probs[cell] * n
        if e >= 5:
            observed.append(counts.get(cell, 0))
            expected.append(e)
        else:
            pool_o += counts.get(cell, 0)
            pool_e += e
    if pool_e > 0:
        observed.append(pool_o)
        expected.append(pool_e)
    o = torch.tensor(observed, dtype=torch.float64)
    e = torch.tensor(expected, dtype=torch.float64)
    stat = ((o - e) ** 2 / e).sum()
    df = len(observed) - 1
    return torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), stat / 2).item()


def sample(llm: LLM, params: SamplingParams) -> dict[tuple[int, ...], int]:
    outputs = llm.generate([PROMPT] * SAMPLES, params)
    counts: dict[tuple[int, ...], int] = {}
    for o in outputs:
        key = tuple(o.token_ids[:LENGTH])
        assert len(key) == LENGTH
        counts[key] = counts.get(key, 0) + 1
    assert llm.used_pages == 0
    return counts


@pytest.fixture(scope="module")
def setup():
    target = tiny_target(seed=11, vocab=VOCAB)
    return select_backend("cpu"), target, tiny_eagle1(target, seed=4), hf_copy(target)


CASES = [
    ("tree", SpecConfig(num_steps=2, topk=2, num_draft_tokens=5),
     SamplingParams(temperature=0.8, max_new_tokens=LENGTH)),
    ("chain", SpecConfig(num_steps=3, topk=1),
     SamplingParams(temperature=1.0, max_new_tokens=LENGTH)),
    ("tree-topk-topp", SpecConfig(num_steps=2, topk=3, num_draft_tokens=6),
     SamplingParams(temperature=1.2, top_k=5, top_p=0.9, max_new_tokens=LENGTH)),
]


@pytest.mark.parametrize("name,spec,params", CASES, ids=[c[0] for c in CASES])
def test_speculative_sampling_matches_the_target_distribution(setup, name, spec, params):
    backend, target, head, hf = setup
    llm = LLM.from_models(backend, target, head, spec=spec, seed=2024, max_batch_size=64)
    counts = sample(llm, params)
    probs = exact_distribution(hf, params)
    p_value = chi_square_p_value(counts, probs, SAMPLES)
    assert p_value > ALPHA, f"{name}: chi-square p = {p_value:.2e}"
    # the head was really used: drafts were accepted, and some were rejected
    longer = SamplingParams(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                            max_new_tokens=16)
    outputs = llm.generate([PROMPT] * 64, longer)
    mean_accept = sum(o.accept_length for o in outputs) / len(outputs)
    assert 1.05 < mean_accept < spec.num_steps + 1


def test_the_statistic_detects_a_wrong_distribution(setup):
    """Control: samples at temperature 1.0 fail against the exact distribution at 0.7."""
    backend, target, head, hf = setup
    llm = LLM.from_models(backend, target, head, spec=SpecConfig(2, 2, 5), seed=7,
                          max_batch_size=64)
    counts = sample(llm, SamplingParams(temperature=1.0, max_new_tokens=LENGTH))
    probs = exact_distribution(hf, SamplingParams(temperature=0.7, max_new_tokens=LENGTH))
    assert chi_square_p_value(counts, probs, SAMPLES) < ALPHA


def test_enumeration_sums_to_one(setup):
    *_, hf = setup
    probs = exact_distribution(hf, SamplingParams(temperature=0.9, top_k=3, max_new_tokens=LENGTH))
    assert len(probs) == VOCAB**LENGTH
    assert abs(sum(probs.values()) - 1.0) < 1e-9
    assert all(len(k) == LENGTH for k in itertools.islice(probs, 5))
