"""Plain decoding with one iteration in flight (spec/overlap.py).

The oracle is the same model decoded without overlap (plain decoding, tested against HF
transformers in tests/core/model): tokens, finish reasons and text must be identical, and
every KV page must come back, whatever ends a request (length, EOS, stop token, stop
string, end of context, cancellation) and however the batch changes (requests joining,
preempted and resumed).
"""

from __future__ import annotations

import pytest
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative import overlap as overlap_module
from eagle_hal.testing.models import near_bigram_target, tiny_target
from eagle_hal.testing.tokenizers import CharTokenizer

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9], [3, 2], [3, 8, 4, 6, 2, 6, 4, 3]]


@pytest.fixture(scope="module")
def backend():
    return select_backend("cpu")


@pytest.fixture(scope="module")
def target():
    return near_bigram_target(seed=5)


def run(backend, target, prompts, params, *, overlap, **kwargs):
    llm = LLM.from_models(backend, target, None, kwargs.pop("tokenizer", None), **kwargs)
    llm.worker.overlap = overlap
    outputs = llm.generate(prompts, params)
    assert llm.used_pages == 0 and llm.leaked_pages == 0
    return llm, [(list(o.token_ids), o.finish_reason, o.text) for o in outputs]


def both(backend, target, prompts, params, **kwargs):
    _, expected = run(backend, target, prompts, params, overlap=False, **dict(kwargs))
    llm, got = run(backend, target, prompts, params, overlap=True, **kwargs)
    return llm, got, expected


@pytest.mark.parametrize("max_batch_size", [1, 2, 16])
def test_greedy_outputs_equal_plain_decoding_as_requests_join_and_finish(
    backend, target, max_batch_size
):
    """Different lengths finish at different iterations; queued requests join mid-run."""
    params = [SamplingParams(max_new_tokens=n) for n in (7, 19, 3, 25, 12)]
    llm, got, expected = both(backend, target, PROMPTS, params, max_batch_size=max_batch_size)
    assert got == expected
    assert [len(t) for t, _, _ in got] == [7, 19, 3, 25, 12]


def test_verify_passes_count_only_iterations_read_back(backend, target):
    """The call that first launches a request returns nothing for it: no pass counted."""
    llm = LLM.from_models(backend, target, None)
    llm.worker.overlap = True
    out = llm.generate(PROMPTS, SamplingParams(max_new_tokens=9))
    for o in out:
        assert o.stats.verify_steps == len(o.token_ids) - 1  # the first came from prefill


def test_sampled_outputs_equal_plain_decoding(backend, target):
    params = [SamplingParams(max_new_tokens=20, temperature=0.9, top_p=0.9, seed=s)
              for s in range(len(PROMPTS))]
    _, got, expected = both(backend, target, PROMPTS, params, max_batch_size=3)
    assert got == expected


def test_eos_stop_tokens_and_stop_strings_cut_where_plain_decoding_does(backend):
    model = tiny_target(seed=2, eos=(7, 11))
    _, got, expected = both(backend, model, PROMPTS, SamplingParams(max_new_tokens=40),
                            max_batch_size=2)
    assert got == expected
    assert any(len(t) < 40 for t, _, _ in got)  # EOS really ended some request early
    for params in (SamplingParams(max_new_tokens=40, stop_token_ids=(5, 9), ignore_eos=True),
                   SamplingParams(max_new_tokens=40, stop=("d", "ja"), ignore_eos=True)):
        _, got, expected = both(backend, model, PROMPTS, params, max_batch_size=2,
                                tokenizer=CharTokenizer())
        assert got == expected


def test_preemption_and_the_end_of_the_context(backend, target):
    prompts = [p * 2 for p in PROMPTS] * 2
    llm, got, expected = both(backend, target, prompts, SamplingParams(max_new_tokens=40),
                              kv_cache_tokens=160, max_batch_size=10)
    assert got == expected
    _, got, expected = both(backend, target, PROMPTS, SamplingParams(max_new_tokens=100),
                            max_context=40)
    assert got == expected


def test_cancelling_in_flight_frees_everything_and_spares_the_others(backend, target):
    _, expected = run(backend, target, PROMPTS, SamplingParams(max_new_tokens=30), overlap=False)
    llm = LLM.from_models(backend, target, None)
    llm.worker.overlap = True
    got: dict[int, list[int]] = {}
    victim = None
    for delta in llm.stream(PROMPTS, SamplingParams(max_new_tokens=30)):
        got.setdefault(delta.request_id, []).extend(delta.token_ids)
        if victim is None and len(got[delta.request_id]) == 4:
            victim = delta.request_id
            llm.engine.cancel(victim)
    assert llm.used_pages == 0
    for rid, (tokens, _, _) in zip(sorted(got), expected, strict=True):
        assert got[rid] == (tokens[: len(got[rid])] if rid == victim else tokens)


def test_switching_overlap_off_mid_run_recomputes_the_dropped_iteration(backend, target):
    llm = LLM.from_models(backend, target, None)
    _, expected = run(backend, target, PROMPTS, SamplingParams(max_new_tokens=15), overlap=False)
    llm.worker.overlap = True
    stream = llm.stream(PROMPTS, SamplingParams(max_new_tokens=15))
    got: dict[int, list[int]] = {}
    for step, delta in enumerate(stream):
        got.setdefault(delta.request_id, []).extend(delta.token_ids)
        llm.worker.overlap = step % 7 < 4  # on and off again while requests run
    assert [got[rid] for rid in sorted(got)] == [t for t, _, _ in expected]
    assert llm.used_pages == 0


def test_the_next_iteration_is_launched_before_the_previous_is_read(backend, target, monkeypatch):
    """The point of overlap: each call queues its forward before waiting for the last one."""
    events: list[str] = []
    llm = LLM.from_models(backend, target, None)
    llm.worker.overlap = True
    run_target = llm.runner.run_target
    monkeypatch.setattr(llm.runner, "run_target",
                        lambda *a, **k: (events.append("launch"), run_target(*a, **k))[1])
    read = overlap_module.InFlight.read
    monkeypatch.setattr(overlap_module.InFlight, "read",
                        lambda self: (events.append("read"), read(self))[1])
    llm.generate([PROMPTS[0]], SamplingParams(max_new_tokens=6))
    decode = events[1:]  # the first launch is the prefill's
    # prefill emits token 1; tokens 2..6 come from 5 reads, each after a later launch
    assert decode == ["launch", "launch", "read"] + ["launch", "read"] * 4


class ScriptedDepths:
    """A controller that runs a fixed cycle of depths and ignores what it observes."""

    def __init__(self, cycle):
        self.cycle, self.calls, self.observed = cycle, 0, []

    def choose(self, batch_size):
        steps = self.cycle[self.calls % len(self.cycle)]
        self.calls += 1
        return steps

    def observe(self, batch_size, steps, accept_length, *rest):
        self.observed.append((steps, accept_length))


# S > 0 for two calls or more: its iterations overlap as well (speculative.speculative_overlap),
# and a chain's first call only launches, so a single call at S > 0 would observe nothing
@pytest.mark.parametrize("cycle", [(0, 0, 0, 3, 3, 0, 0, 1, 1, 1, 0),
                                   (0, 3, 3, 0, 3, 3, 5, 5, 0, 0, 0, 0, 0)])
def test_adaptive_idle_iterations_overlap_and_the_draft_catches_up(backend, cycle):
    """At S = 0 the adaptive mode overlaps too; its read-back tokens and features feed the
    catch-up, and switching to S > 0 drops the iteration in flight. Oracles: plain
    decoding's output, and the same depths run without overlap: a bigram target and a
    head that predicts it from the token it is fed accept a share of the drafted tokens
    that drops (0.92 -> 0.55 here) when the draft missed the idle iterations and guesses
    from a stale token."""
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.testing.models import matching_eagle1

    bigram = near_bigram_target(seed=5, attention_scale=0.0)
    head = matching_eagle1(bigram)
    _, expected = run(backend, bigram, PROMPTS, SamplingParams(max_new_tokens=30), overlap=False,
                      max_batch_size=3)
    spec = SpecConfig(num_steps=3, topk=2, num_draft_tokens=8, adaptive=True,
                      adaptive_steps=(0, 1, 3, 5))
    shares = []
    for overlap in (False, True):
        llm = LLM.from_models(backend, bigram, head, None, spec, max_batch_size=3, seed=0)
        llm.worker.overlap = overlap
        llm.worker.controller = controller = ScriptedDepths(cycle)
        out = llm.generate(PROMPTS, SamplingParams(max_new_tokens=30))
        assert [(list(o.token_ids), o.finish_reason, o.text) for o in out] == expected
        assert llm.used_pages == 0 and llm.leaked_pages == 0 and len(llm.worker.draft.pending) == 0
        depths = llm.worker.iterations_at_depth
        assert depths[0] > 0 and sum(n for s, n in depths.items() if s > 0) > 0
        deep = [(s, a) for s, a in controller.observed if s > 0]
        shares.append(sum(a for _, a in deep) / sum(s + 1 for s, _ in deep))
    assert any(s == 0 for s, _ in controller.observed)  # overlapped iterations are timed too
    # the share of drafted tokens accepted, as high as the draft that catches up step by step
    assert shares[1] > shares[0] - 0.05


@pytest.mark.parametrize("max_new_tokens", [14, 15, 16, 200])
def test_a_request_that_fits_the_kv_cache_without_overlap_fits_with_it(backend, target,
                                                                          max_new_tokens):
    """At the cache's last page the iteration in flight is drained, not dropped with an error."""
    llm, got, expected = both(backend, target, [[3, 1, 4, 1, 5]],
                              SamplingParams(max_new_tokens=max_new_tokens),
                              kv_cache_tokens=20, max_batch_size=2)
    assert got == expected


def test_adaptive_idle_iterations_with_an_eagle3_head(backend):
    """EAGLE-3 reads the target's residual streams: the overlapped forward must return them."""
    import torch
    from eagle_hal.model.eagle import Eagle3DraftModel
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.testing.models import randomize, tiny_config

    target = tiny_target(seed=1, layers=4)
    head = Eagle3DraftModel(tiny_config(target.config.vocab_size, layers=1), target,
                            draft_vocab_size=97, dtype=torch.float32)
    randomize(head, 3)
    spec = SpecConfig(num_steps=3, topk=2, num_draft_tokens=8, adaptive=True,
                      adaptive_steps=(0, 1, 3))
    _, expected = run(backend, target, PROMPTS[:2], SamplingParams(max_new_tokens=12),
                      overlap=False)
    llm = LLM.from_models(backend, target, head, None, spec, seed=0)
    llm.worker.overlap = True
    llm.worker.controller = ScriptedDepths((0, 0, 0, 3, 0, 1))
    out = llm.generate(PROMPTS[:2], SamplingParams(max_new_tokens=12))
    assert [(list(o.token_ids), o.finish_reason, o.text) for o in out] == expected
