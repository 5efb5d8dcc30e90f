"""Area 7, end to end: a tiny random Llama and EAGLE-1 head on the backend.

* Temperature 0: speculative output is token-identical to plain decoding (no draft) on the
  same backend, for chains and trees, with a random head (short accepts) and a matching
  head (long accepts), over a ragged batch.
* Temperature > 0: the joint law of the first three emitted tokens (vocabulary of 8) under
  speculation equals the law under plain sampling: a two-sample chi-square homogeneity test
  at ALPHA = 1e-4 (false-failure probability 1e-4 for a correct backend; fixed seeds). The
  samplers it rests on are held to the exact target law by the sampling area.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from eagle_hal.backend import Backend
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig

ALPHA = 1e-4
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], list(range(10, 40)), [42], list(range(60, 20, -3))]
SPECS = [
    pytest.param(SpecConfig(num_steps=3, topk=1, num_draft_tokens=4), id="chain-S3"),
    pytest.param(SpecConfig(num_steps=3, topk=2, num_draft_tokens=6), id="tree-K2-S3-N6"),
    pytest.param(SpecConfig(num_steps=4, topk=4, num_draft_tokens=12), id="tree-K4-S4-N12"),
]


def _llm(backend: Backend, target: Any, head: Any, spec: SpecConfig, **kwargs: Any) -> Any:
    from eagle_hal.api import LLM

    return LLM.from_models(backend, target, head, spec=spec, **kwargs)


@pytest.fixture(scope="module")
def model_pairs(backend: Backend) -> dict[str, tuple[Any, Any]]:
    from eagle_hal.testing.models import (
        matching_eagle1,
        near_bigram_target,
        tiny_eagle1,
        tiny_target,
    )

    device = backend.torch_device
    random_target = tiny_target(seed=11, device=device)
    good_target = near_bigram_target(seed=5, device=device)
    return {
        "random-head": (random_target, tiny_eagle1(random_target, seed=12).to(device)),
        # an EAGLE-1 head of two stacked layers, narrower MLPs: two layers of draft KV
        "stacked-head": (
            random_target,
            tiny_eagle1(random_target, seed=13, layers=2, intermediate_size=24).to(device),
        ),
        "matching-head": (good_target, matching_eagle1(good_target, noise=0.02).to(device)),
    }


@pytest.mark.parametrize("pair", ["random-head", "stacked-head", "matching-head"])
@pytest.mark.parametrize("spec", SPECS)
def test_greedy_equals_plain_decoding(
    backend: Backend, model_pairs: Any, pair: str, spec: SpecConfig
) -> None:
    """At temperature 0 speculation changes nothing but speed; no page leaks."""
    target, head = model_pairs[pair]
    params = SamplingParams(max_tokens=16)
    plain = _llm(backend, target, None, SpecConfig(num_steps=0)).generate(PROMPTS, params)
    llm = _llm(backend, target, head, spec)
    outputs = llm.generate(PROMPTS, params)
    for i, (got, expected) in enumerate(zip(outputs, plain, strict=True)):
        assert got.error is None, f"request {i} failed: {got.error}"
        pairs = zip(got.token_ids, expected.token_ids, strict=False)
        assert got.token_ids == expected.token_ids, (
            f"{pair} {spec}: prompt {i} speculative tokens differ from plain decoding at position "
            f"{next((j for j, (a, b) in enumerate(pairs) if a != b), '?')}: "
            f"{list(got.token_ids)} vs {list(expected.token_ids)}"
        )
    assert llm.used_pages == 0, f"{llm.used_pages} KV pages still held after the batch finished"


def _joint_counts(
    llm: Any, params: list[SamplingParams], prompt: list[int]
) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for out in llm.generate([prompt] * len(params), params):
        assert out.error is None and len(out.token_ids) >= 3, f"bad output {out}"
        key = tuple(out.token_ids[:3])
        counts[key] = counts.get(key, 0) + 1
    assert llm.used_pages == 0, f"{llm.used_pages} KV pages still held"
    return counts


def _homogeneity_pvalue(a: dict[Any, int], b: dict[Any, int]) -> float:
    """Two-sample chi-square test that ``a`` and ``b`` come from one law (sparse cells pooled)."""
    n_a, n_b = sum(a.values()), sum(b.values())
    cells, pooled = [], [0, 0]
    for key in set(a) | set(b):
        x, y = a.get(key, 0), b.get(key, 0)
        if (x + y) * min(n_a, n_b) / (n_a + n_b) >= 5:
            cells.append((x, y))
        else:
            pooled[0] += x
            pooled[1] += y
    if sum(pooled):
        cells.append(tuple(pooled))
    table = torch.tensor(cells, dtype=torch.float64)  # [cells, 2]
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    statistic = ((table - expected) ** 2 / expected).sum()
    dof = torch.tensor(max(len(cells) - 1, 1) / 2.0, dtype=torch.float64)
    return float(torch.special.gammaincc(dof, statistic / 2).item())


def test_sampling_distribution_equals_plain(backend: Backend) -> None:
    """At temperature 0.9 / top-k 6, the first three tokens' law is plain sampling's."""
    from eagle_hal.testing.models import tiny_eagle1, tiny_target

    device = backend.torch_device
    target = tiny_target(seed=11, vocab=8, device=device)
    head = tiny_eagle1(target, seed=4).to(device)
    samples, prompt = 800, [1, 5, 2, 7]
    plain_params = [SamplingParams(temperature=0.9, top_k=6, max_tokens=3, seed=s)
                    for s in range(samples)]
    spec_params = [SamplingParams(temperature=0.9, top_k=6, max_tokens=3, seed=10**6 + s)
                   for s in range(samples)]
    spec = SpecConfig(num_steps=2, topk=2, num_draft_tokens=5)
    plain = _joint_counts(_llm(backend, target, None, SpecConfig(num_steps=0), max_batch_size=64),
                          plain_params, prompt)
    speculative = _joint_counts(_llm(backend, target, head, spec, max_batch_size=64),
                                spec_params, prompt)
    p = _homogeneity_pvalue(speculative, plain)
    assert p > ALPHA, (
        f"speculative sampling's law differs from plain sampling's (chi-square p = {p:.2e})"
    )
