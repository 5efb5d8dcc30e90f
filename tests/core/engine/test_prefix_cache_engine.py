"""Prefix caching through the engine: the same tokens, accept lengths and draft state as
without it.

The oracle is the same engine with the prefix cache off, which computes every prompt from
scratch. Verification would hide a wrong draft cache in the tokens (a worse draft is only
slower), so the fixed-depth modes also compare each request's accepted tokens and verify
steps, and the draft's top-K and hidden state right after each prefill (where the tree of
the first decode iteration grows from). Prompts diverge right after page boundaries: a page
keyed by its own tokens only would hand out draft K/V computed from another next token.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target
from prefix_workloads import conversation, shared_prefix, summary

MODES = {
    "chain": SpecConfig(3, 1, 4),
    "tree": SpecConfig(3, 2, 6),
    "adaptive": SpecConfig(3, adaptive=True),
    "plain": None,
}
FIXED = ("chain", "tree", "plain")  # depths that do not depend on timing
GREEDY = SamplingParams(max_tokens=10, ignore_eos=True)
SAMPLED = SamplingParams(max_tokens=10, ignore_eos=True, temperature=0.9, seed=11)


@pytest.fixture(scope="module")
def backend():
    return select_backend("cpu")


@pytest.fixture(scope="module")
def models():
    target = near_bigram_target(seed=5)
    assert target.dtype == torch.float32
    head = matching_eagle1(target, noise=0.02)
    # matching_eagle1 zeroes its attention's output, so its K/V would not matter: give
    # the draft's attention a say, so that a wrong cached draft K/V shows in its state
    with torch.no_grad():
        o_proj = head.layers[0].self_attn.o_proj.weight
        o_proj.copy_(0.3 * torch.randn(o_proj.shape, generator=torch.Generator().manual_seed(4)))
    return target, head


def make(backend, models, mode: str, page_size: int, cache: bool) -> LLM:
    target, head = models
    spec = MODES[mode]
    return LLM.from_models(backend, target, head if spec else None, None,
                           spec or SpecConfig(num_steps=0), page_size=page_size, seed=0,
                           max_batch_size=4, enable_prefix_caching=cache)


class Spy:
    """Each prefilled request's draft state right after its prefill (the tree of the
    first decode iteration grows from it)."""

    def __init__(self, llm: LLM) -> None:
        self.states: list[tuple[tuple[int, ...], torch.Tensor, torch.Tensor, torch.Tensor]] = []
        worker, original = llm.worker, llm.worker.prefill

        def prefill(requests):
            emitted = original(requests)
            if worker.has_draft:
                state = worker.draft_states(requests)
                for b, request in enumerate(requests):
                    self.states.append((tuple(request.all_ids), state.topk_probs[b].clone(),
                                        state.topk_ids[b].clone(), state.hidden[b].clone()))
            return emitted

        worker.prefill = prefill


def check_draft_states(on: Spy, off: Spy) -> None:
    assert len(on.states) == len(off.states) > 0
    for (ids_on, p_on, k_on, h_on), (ids_off, p_off, k_off, h_off) in zip(
        on.states, off.states, strict=True
    ):
        assert ids_on == ids_off
        assert torch.equal(k_on, k_off), f"draft top-K after prefilling {ids_on}"
        torch.testing.assert_close(p_on, p_off, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(h_on, h_off, rtol=1e-5, atol=1e-5)


CASES = [(mode, params) for mode in MODES for params in (GREEDY, SAMPLED)
         # the adaptive mode's depths follow measured time, and a seeded sample path
         # depends on the tree it verifies (its law does not): greedy tokens only
         if mode != "adaptive" or params is GREEDY]


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize(("mode", "params"), CASES,
                         ids=[f"{m}-{'greedy' if p is GREEDY else 'seeded'}" for m, p in CASES])
def test_conversation_and_shared_prefix_match_the_uncached_engine(
    backend, models, mode, page_size, params
) -> None:
    results, spies, llms = {}, {}, {}
    for cache in (False, True):
        llm = llms[cache] = make(backend, models, mode, page_size, cache)
        spies[cache] = Spy(llm)
        results[cache] = (conversation(llm, params), shared_prefix(llm, params))
        assert llm.used_pages == 0 and llm.leaked_pages == 0
    (turns_off, batch_off), (turns_on, batch_on) = results[False], results[True]
    tokens = lambda outs: [list(o.token_ids) for o in outs]  # noqa: E731
    assert tokens(turns_on) == tokens(turns_off)
    assert tokens(batch_on) == tokens(batch_off)
    stats = llms[True].prefix_cache_stats
    assert stats["cached_tokens"] > 0 and llms[True].cached_pages > 0
    assert llms[False].prefix_cache_stats is None
    if mode in FIXED:
        assert summary(turns_on) == summary(turns_off)
        assert summary(batch_on) == summary(batch_off)
        if MODES[mode] is not None:
            check_draft_states(spies[True], spies[False])
    elif mode == "adaptive":  # depths follow measured time; the draft may lag (S = 0)
        check_draft_states(spies[True], spies[False])


@pytest.mark.parametrize("page_size", [1, 4])
def test_hit_accounting_of_a_second_turn(backend, models, page_size) -> None:
    """Turn 2 hits exactly the full pages of turn 1's prompt and answer below the answer's
    last token (whose K/V were never computed, nor the draft's of the one before it)."""
    llm = make(backend, models, "tree", page_size, True)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    (first,) = llm.generate([prompt], GREEDY)
    assert llm.prefix_cache_stats["cached_tokens"] == 0
    second = prompt + list(first.token_ids) + [7, 2]
    llm.generate([second], GREEDY)
    computed = len(prompt) + len(first.token_ids) - 1  # positions turn 1 computed
    stats = llm.prefix_cache_stats
    assert stats["cached_tokens"] == computed // page_size * page_size
    assert stats["lookup_tokens"] == len(prompt) + len(second) and stats["lookups"] == 2


def test_preemption_and_cancellation_release_only_references(backend, models) -> None:
    """A KV cache so small that requests sharing a prefix preempt each other: each frees
    only its own references, and the tokens are those of the uncached engine."""
    target, head = models
    outputs = {}
    for cache in (False, True):
        llm = LLM.from_models(backend, target, head, None, SpecConfig(3, 2, 6), page_size=4,
                              kv_cache_tokens=96, max_batch_size=4, seed=0,
                              enable_prefix_caching=cache)
        system = [2, 7, 1, 8, 2, 8, 1, 8, 3, 3, 4, 4]
        out = llm.generate([system + [i, i + 1] for i in range(6)],
                           SamplingParams(max_tokens=14, ignore_eos=True))
        outputs[cache] = [list(o.token_ids) for o in out]
        preempted = sum(o.stats.preemptions for o in out)
        assert llm.used_pages == 0 and llm.leaked_pages == 0
        requests = [llm.engine.add_request(system + [9], GREEDY) for _ in range(3)]
        llm.engine.step()  # admitted and prefilled
        llm.engine.cancel(requests[0].request_id)
        assert not llm.runner.table.leaked_pages()
        llm.engine.run()
        assert llm.used_pages == 0 and llm.leaked_pages == 0
    assert preempted > 0
    assert outputs[True] == outputs[False]


def test_scopes_never_share_pages(backend, models) -> None:
    """Requests of another scope (another API key) compute the same prompt from scratch."""
    llm = make(backend, models, "chain", 1, True)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    engine = llm.engine
    for scope, hits in (("key:a", 0), ("key:b", 0), ("key:a", 7), (None, 0), (None, 7)):
        before = llm.prefix_cache_stats["cached_tokens"]
        engine.add_request(prompt, GREEDY, cache_scope=scope)
        engine.run()
        assert llm.prefix_cache_stats["cached_tokens"] - before == hits, scope
    assert llm.used_pages == 0 and llm.leaked_pages == 0


def test_server_scope_and_metrics(backend, models) -> None:
    from eagle_hal.serve.auth import cache_scope
    from eagle_hal.serve.metrics import ServerMetrics
    from prometheus_client.parser import text_string_to_metric_families

    assert cache_scope("Bearer k1", "k1") != cache_scope("Bearer k2", "k1")
    assert cache_scope("Bearer k1", "k1") == cache_scope("bearer  k1 ", "k1")
    assert cache_scope(None, None) == cache_scope("Bearer x", None)  # no auth: one scope
    assert "k1" not in cache_scope("Bearer k1", "k1")
    llm = make(backend, models, "tree", 4, True)
    metrics = ServerMetrics()
    prompt = list(range(2, 20))
    for _ in range(2):
        llm.generate([prompt], GREEDY)
        metrics.engine_state(llm)
    samples = {s.name: s.value for f in text_string_to_metric_families(
        metrics.render().decode()) for s in f.samples}
    assert samples["eagle_hal_prefix_cache_lookup_tokens_total"] == 2 * len(prompt)
    assert samples["eagle_hal_prefix_cache_hit_tokens_total"] == 16  # 17 tokens key 4 pages
    assert samples["eagle_hal_prefix_cache_hit_rate"] == 16 / 36
    assert samples["eagle_hal_kv_pages_cached"] == llm.cached_pages > 0
    assert samples["eagle_hal_kv_pages_used"] == 0
