"""The draft idles at S = 0 and catches up losslessly when speculation resumes.

Oracles: plain greedy decoding with no draft (the tokens), and a fresh prefill of the same
context (the draft state a draft that had followed along all the way would hold).
Tiny float32 models on the CPU backend; depths forced by a scripted controller.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], list(range(10, 40)), [42], [5, 5, 6, 6, 7], [8, 1]]
SCHEDULE = (5, 0, 0, 3, 0, 5, 0, 0, 0, 1, 0, 0, 3, 0, 0)


class ScriptedController:
    """Stands in for the adaptive controller: depths from a fixed cycle."""

    def __init__(self, schedule: tuple[int, ...]) -> None:
        self._depths = itertools.cycle(schedule)
        self.observed: list[int] = []

    def choose(self, batch_size: int) -> int:
        return next(self._depths)

    def observe(self, batch_size, steps, accept_length, seconds, catch_up_seconds=0.0) -> None:
        self.observed.append(steps)


@pytest.fixture(scope="module")
def models():
    target = near_bigram_target(seed=5)
    return target, matching_eagle1(target, noise=0.02)


def _plain(backend, target, prompts, params):
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0))
    return [list(o.token_ids) for o in llm.generate(prompts, params)]


def _scripted(backend, models, topk, nodes, schedule=SCHEDULE, **kwargs):
    target, head = models
    spec = SpecConfig(5, topk, nodes, adaptive=True, adaptive_steps=(0, 1, 3, 5))
    llm = LLM.from_models(backend, target, head, spec=spec, **kwargs)
    llm.worker.controller = ScriptedController(schedule)
    return llm


@pytest.mark.parametrize("topk,nodes", [(1, None), (2, 8), (4, 16)])
def test_forced_depth_schedules_are_lossless(cpu_backend, models, topk, nodes):
    """5 -> 0 -> 0 -> 3 -> 0 -> 5 ...: the tokens are plain greedy decoding's, with
    requests of mixed lengths admitted while the others sit at S = 0."""
    params = [SamplingParams(max_new_tokens=12 + 7 * i) for i in range(len(PROMPTS))]
    expected = _plain(cpu_backend, models[0], PROMPTS, params)
    llm = _scripted(cpu_backend, models, topk, nodes, max_batch_size=3)
    lagging_at_prefill = []
    prefill = llm.worker.prefill

    def watched_prefill(requests):
        lagging_at_prefill.append(len(llm.worker.draft.pending))
        return prefill(requests)

    llm.worker.prefill = watched_prefill
    out = llm.generate(PROMPTS, params)
    assert [list(o.token_ids) for o in out] == expected
    assert any(n > 0 for n in lagging_at_prefill[1:]), lagging_at_prefill  # admitted mid-way
    assert {0, 3, 5} <= set(llm.worker.controller.observed)
    assert llm.used_pages == 0 and len(llm.worker.draft.pending) == 0


def test_preemption_while_lagging_is_lossless(cpu_backend, models):
    """A cache too small for the batch preempts requests, some while their draft lags."""
    prompts = [p * 2 for p in PROMPTS] * 2
    params = SamplingParams(max_new_tokens=40)
    expected = _plain(cpu_backend, models[0], prompts, params)
    llm = _scripted(cpu_backend, models, 2, 8, schedule=(0, 0, 3, 0, 0, 0, 5),
                    kv_cache_tokens=200, max_batch_size=10)
    out = llm.generate(prompts, params)
    assert [list(o.token_ids) for o in out] == expected
    assert sum(o.stats.preemptions for o in out) > 0
    assert llm.used_pages == 0 and llm.leaked_pages == 0


def test_cancelling_a_lagging_request_forgets_its_tokens(cpu_backend, models):
    """A request cancelled at S = 0 leaves nothing pending; the others stay lossless."""
    params = SamplingParams(max_new_tokens=20)
    expected = _plain(cpu_backend, models[0], PROMPTS[:3], params)
    llm = _scripted(cpu_backend, models, 2, 8, schedule=(0,) * 6 + (3,))
    requests = [llm.engine.add_request(p, params) for p in PROMPTS[:3]]
    for _ in range(4):  # a prefill, then three iterations at S = 0
        llm.engine.step()
    assert len(llm.worker.draft.pending) == 3
    llm.engine.cancel(requests[1].request_id)
    assert requests[1].request_id not in llm.worker.draft.pending
    llm.engine.run()
    assert list(requests[0].output_ids) == expected[0]
    assert list(requests[2].output_ids) == expected[2]
    assert llm.used_pages == 0


@pytest.mark.parametrize("topk,nodes", [(1, None), (4, 16)])
def test_catch_up_gives_the_followed_along_draft_state(cpu_backend, models, topk, nodes):
    """After a stretch at S = 0 and one catch-up, each request's draft state (top-k ids,
    probabilities, hidden) equals that of a fresh prefill of the same context, i.e. of a
    draft that consumed every token (float32; atol 1e-5)."""
    target, head = models
    params = SamplingParams(max_new_tokens=64)
    llm = _scripted(cpu_backend, models, topk, nodes, schedule=(3, 0, 0, 0, 5, 0, 0, 0, 0, 0))
    requests = [llm.engine.add_request(p, params) for p in PROMPTS[:4]]
    for _ in range(1 + 10):  # the prefill, then 3, 0, 0, 0, 5, then five at S = 0
        llm.engine.step()
    assert all(llm.worker.draft.pending.lag(r.request_id) == 5 for r in requests)
    llm.worker.catch_up(requests)
    caught_up = llm.worker.draft_states(requests)

    oracle = LLM.from_models(cpu_backend, target, head, spec=SpecConfig(5, topk, nodes))
    resumed = []
    for request in requests:
        copy = oracle.engine.add_request(request.prompt_ids, params)
        copy.output_ids.extend(request.output_ids)  # resumed: prefill over all but the root
        resumed.append(copy)
    oracle.engine.step()
    assert all(c.cached_len == r.cached_len for c, r in zip(resumed, requests, strict=True))
    followed = oracle.worker.draft_states(resumed)
    assert torch.equal(caught_up.topk_ids, followed.topk_ids)
    torch.testing.assert_close(caught_up.topk_probs, followed.topk_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(caught_up.hidden, followed.hidden, atol=1e-5, rtol=0)


def test_fixed_zero_steps_does_not_run_the_draft(cpu_backend, models):
    """SpecConfig(num_steps=0) with a draft is plain decoding: the draft never runs."""
    target, head = models
    llm = LLM.from_models(cpu_backend, target, head, spec=SpecConfig(num_steps=0))
    calls = []
    llm.runner.run_draft = lambda *a, **k: calls.append(1)
    params = SamplingParams(max_new_tokens=10)
    out = llm.generate(PROMPTS[:2], params)
    assert [list(o.token_ids) for o in out] == _plain(cpu_backend, target, PROMPTS[:2], params)
    assert not calls and len(llm.worker.draft.pending) == 0


def test_the_feature_log_stays_bounded_while_requests_keep_arriving(monkeypatch):
    """Continuous batching at S = 0: some request is always pending, requests come and go
    (taken or dropped). The log is compacted, so it stays within twice its live rows (above
    the compaction floor), and every take still returns exactly the tokens and features
    recorded for its requests (oracle: a plain per-request record kept here)."""
    from eagle_hal.speculative import catchup

    monkeypatch.setattr(catchup, "_COMPACT_MIN_ROWS", 16)
    log = catchup.PendingDraftInputs()
    expected: dict[int, tuple[list[int], list[torch.Tensor]]] = {}
    generator = torch.Generator().manual_seed(0)
    active = [0, 1, 2]
    next_id, largest = 3, 0
    for iteration in range(400):
        features = torch.randn(len(active), 4, generator=generator)
        tokens = [iteration * 10 + b for b in range(len(active))]
        log.add(active, [7] * len(active), tokens, features)
        for b, request in enumerate(active):
            record = expected.setdefault(request, ([], []))
            record[0].append(tokens[b])
            record[1].append(features[b])
        live = sum(len(t) for t, _ in expected.values())
        assert log.log_rows <= max(16, 2 * live) + len(active)
        largest = max(largest, log.log_rows)
        if iteration % 7 == 6:  # the oldest request finishes: dropped
            gone = active.pop(0)
            log.drop(gone)
            del expected[gone]
        if iteration % 5 == 4:  # one catches up (speculation resumed for it)
            request = active[-1]
            caught = log.take([request])
            assert caught is not None and caught.input_ids == expected[request][0]
            assert torch.equal(caught.features, torch.stack(expected[request][1]))
            del expected[request]
        while len(active) < 3:
            active.append(next_id)
            next_id += 1
    assert largest < 400  # without compaction the log would reach ~1,200 rows
    lagging = [r for r in active if r in expected]  # the last one may just have caught up
    caught = log.take(active)
    assert caught is not None and caught.request_ids == lagging
    assert caught.input_ids == [t for r in lagging for t in expected[r][0]]
    assert torch.equal(caught.features, torch.cat([torch.stack(expected[r][1]) for r in lagging]))
    assert log.log_rows == 0


def test_catch_ups_are_counted_with_the_tokens_idle_iterations_emitted(cpu_backend, models):
    """``worker.catch_ups`` counts one catch-up per return to S > 0 after a stretch at S = 0,
    over as many tokens as the stretch emitted (one request: one token per idle
    iteration; oracle: the depths the scripted controller handed out)."""
    llm = _scripted(cpu_backend, models, 2, 8, schedule=(0, 0, 0, 3, 0, 5, 0, 0, 1))
    llm.generate([PROMPTS[2]], SamplingParams(max_new_tokens=40, ignore_eos=True))
    observed = llm.worker.controller.observed
    expected_catch_ups = expected_tokens = idle = 0
    for steps in observed:
        if steps == 0:
            idle += 1
            continue
        expected_catch_ups += idle > 0
        expected_tokens += idle
        idle = 0
    assert expected_catch_ups >= 5
    assert (llm.worker.catch_ups.catch_ups, llm.worker.catch_ups.tokens) == (
        expected_catch_ups, expected_tokens)
