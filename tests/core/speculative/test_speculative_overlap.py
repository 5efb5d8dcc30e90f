"""Speculative iterations with one in flight (spec/speculative_overlap.py).

The oracle is the same speculative decoding without overlap (itself tested against plain
decoding, and plain decoding against HF transformers): tokens, finish reasons and text
must be identical, and every KV page must come back, for chains and trees, greedy and
sampled, with and without (emulated) graphs, as requests join, finish, are preempted or
reach the end of the context. The CPU runs the device's work synchronously, so overlap is
off there by default; these tests switch it on. What the adaptive controller is told
about those iterations (``spec/reports.py``) is tested in ``test_reports.py``.
"""

from __future__ import annotations

import pytest
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative import speculative_overlap as module
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.adaptive import ScriptedController
from eagle_hal.testing.models import matching_eagle1, tiny_target
from eagle_hal.testing.tokenizers import CharTokenizer
from scripted_overlap import CHAIN, PROMPTS, TREE, WIDE, run, scripted


def both(backend, pair, prompts, params, **kwargs):
    """Without overlap, then with it; checks that some iterations were read back late."""
    _, expected = run(backend, pair, prompts, params, overlap=False, **dict(kwargs))
    apply, applied = module.OverlappedSpeculative._apply, []

    def counting_apply(*args):
        applied.append(1)
        return apply(*args)

    module.OverlappedSpeculative._apply = counting_apply
    try:
        llm, got = run(backend, pair, prompts, params, overlap=True, **kwargs)
    finally:
        module.OverlappedSpeculative._apply = apply
    assert applied, "no iteration was overlapped"
    return llm, got, expected


def lengths(*counts):
    return [SamplingParams(max_new_tokens=n) for n in counts]


@pytest.mark.parametrize("spec", [CHAIN, TREE, WIDE], ids=["chain", "tree", "wide"])
@pytest.mark.parametrize("max_batch_size", [1, 2, 16])
def test_greedy_outputs_equal_decoding_without_overlap(backend, pair, spec, max_batch_size):
    """Requests of different lengths finish at different iterations; queued ones join."""
    llm, got, expected = both(backend, pair, PROMPTS, lengths(7, 19, 3, 25, 12), spec=spec,
                              max_batch_size=max_batch_size)
    assert got == expected
    assert [len(t) for t, *_ in got] == [7, 19, 3, 25, 12]


@pytest.mark.parametrize("spec", [CHAIN, WIDE], ids=["chain", "wide"])
@pytest.mark.parametrize("max_batch_size", [2, 5])
def test_with_graphs(graph_backend, pair, spec, max_batch_size):
    """The draft loop and the verify-to-extend part (engine/graphs/iteration.py) replay as
    graphs, whose host lengths are only upper bounds of the device's, padded to their
    bucket as the batch shrinks."""
    llm, got, expected = both(graph_backend, pair, PROMPTS, lengths(9, 30, 4, 17, 22),
                              spec=spec, max_batch_size=max_batch_size, graphs=True)
    assert got == expected
    assert llm.runner.graphs.iteration_replays > 0


@pytest.mark.parametrize("graphs", [False, True])
def test_a_random_head_proposes_the_same_drafts(backend, graph_backend, graphs):
    """A head whose proposals depend on its hidden state (not only on the token it is fed)
    must start each iteration from the state at the last emitted token, not at the draft
    extend's padding: the verify passes per request show it."""
    from eagle_hal.testing.models import tiny_eagle1

    target = tiny_target(seed=11)
    pair = (target, tiny_eagle1(target, seed=12))
    for spec in (CHAIN, WIDE):
        _, got, expected = both(graph_backend if graphs else backend, pair, PROMPTS,
                                lengths(20, 30, 25, 20, 30), spec=spec, max_batch_size=3,
                                graphs=graphs)
        assert got == expected


def test_sampled_outputs_equal_decoding_without_overlap(backend, pair):
    params = [SamplingParams(max_new_tokens=20, temperature=0.9, top_p=0.9, seed=s)
              for s in range(len(PROMPTS))]
    for spec in (CHAIN, WIDE):
        _, got, expected = both(backend, pair, PROMPTS, params, spec=spec, max_batch_size=3)
        assert got == expected


def test_eos_stop_tokens_and_stop_strings(backend):
    target = tiny_target(seed=2, eos=(7, 11))
    pair = (target, matching_eagle1(target, noise=0.5))
    _, got, expected = both(backend, pair, PROMPTS, SamplingParams(max_new_tokens=40),
                            max_batch_size=2)
    assert got == expected
    assert any(len(t) < 40 for t, *_ in got)  # EOS really ended some request early
    tokenizer = CharTokenizer()
    params = SamplingParams(max_new_tokens=30, stop=["d"], ignore_eos=True)
    _, got, expected = both(backend, pair, PROMPTS, params, tokenizer=tokenizer)
    assert got == expected


def test_preemption_and_the_end_of_the_context(backend, pair):
    prompts = [p * 2 for p in PROMPTS] * 2
    _, got, expected = both(backend, pair, prompts, SamplingParams(max_new_tokens=40),
                            kv_cache_tokens=200, max_batch_size=10)
    assert got == expected
    _, got, expected = both(backend, pair, PROMPTS, SamplingParams(max_new_tokens=100),
                            max_context=48)
    assert got == expected


@pytest.mark.parametrize("max_new_tokens", [10, 14, 15, 200])
def test_a_request_that_fits_the_kv_cache_without_overlap_fits_with_it(backend, pair,
                                                                          max_new_tokens):
    """Near the cache's last page the extra reservation is not taken: the iteration runs
    without overlap rather than failing."""
    _, got, expected = both(backend, pair, [[3, 1, 4, 1, 5]],
                            SamplingParams(max_new_tokens=max_new_tokens),
                            kv_cache_tokens=32, max_batch_size=2)
    assert got == expected


def test_cancelling_in_flight_frees_everything_and_spares_the_others(backend, pair):
    _, expected = run(backend, pair, PROMPTS, SamplingParams(max_new_tokens=30), overlap=False)
    llm = LLM.from_models(backend, *pair, None, TREE, seed=0)
    llm.worker.overlap = True
    got: dict[int, list[int]] = {}
    victim = None
    for delta in llm.stream(PROMPTS, SamplingParams(max_new_tokens=30)):
        got.setdefault(delta.request_id, []).extend(delta.token_ids)
        if victim is None and len(got[delta.request_id]) >= 4:
            victim = delta.request_id
            llm.engine.cancel(victim)
    assert llm.used_pages == 0 and llm.leaked_pages == 0
    for rid, (tokens, *_) in zip(sorted(got), expected, strict=True):
        assert got[rid] == (tokens[: len(got[rid])] if rid == victim else tokens)


def test_switching_overlap_on_and_off_mid_run(backend, pair):
    _, expected = run(backend, pair, PROMPTS, SamplingParams(max_new_tokens=25), overlap=False)
    llm = LLM.from_models(backend, *pair, None, TREE, seed=0)
    got: dict[int, list[int]] = {}
    for step, delta in enumerate(llm.stream(PROMPTS, SamplingParams(max_new_tokens=25))):
        got.setdefault(delta.request_id, []).extend(delta.token_ids)
        llm.worker.overlap = step % 7 < 4
    assert [got[rid] for rid in sorted(got)] == [t for t, *_ in expected]
    assert llm.used_pages == 0 and llm.leaked_pages == 0


def test_each_launch_precedes_the_previous_read_back(backend, pair, monkeypatch):
    """The point of overlap: a call queues its iteration before waiting for the last one;
    one request, so the chain of iterations is never broken until the end."""
    events: list[str] = []
    llm = LLM.from_models(backend, *pair, None, CHAIN, seed=0)
    llm.worker.overlap = True
    launch = module.OverlappedSpeculative._launch
    monkeypatch.setattr(module.OverlappedSpeculative, "_launch",
                        lambda *a, **k: (events.append("launch"), launch(*a, **k))[1])
    read = module.SpecInFlight.read
    monkeypatch.setattr(module.SpecInFlight, "read",
                        lambda self: (events.append("read"), read(self))[1])
    out = llm.generate([PROMPTS[0]], SamplingParams(max_new_tokens=40, ignore_eos=True))
    assert len(out[0].token_ids) == 40
    reads = events.count("read")
    assert reads >= 5 and out[0].stats.verify_steps == reads
    # launch, then (launch, read) pairs; the last launch is dropped when the request ends
    assert events == ["launch"] + ["launch", "read"] * reads
    assert out[0].stats.accept_length > 1.5  # a matching head: these really speculated


def test_an_eagle3_head(backend):
    import torch
    from eagle_hal.model.eagle import Eagle3DraftModel
    from eagle_hal.testing.models import randomize, tiny_config

    target = tiny_target(seed=1, layers=4)
    head = Eagle3DraftModel(tiny_config(target.config.vocab_size, layers=1), target,
                            draft_vocab_size=97, dtype=torch.float32)
    randomize(head, 3)
    _, got, expected = both(backend, (target, head), PROMPTS, SamplingParams(max_new_tokens=20),
                            spec=WIDE, max_batch_size=3)
    assert got == expected


def eligible(worker, steps):
    """Whether the worker would overlap a speculative iteration at depth ``steps``."""
    return worker.overlap and not worker.timed and worker.speculative.eligible(steps)


def test_where_it_does_not_apply(backend, pair):
    """The split pass (timed), S = 0, FULL masks and attention backends that read host
    lengths decode without overlap; the adaptive mode's S > 0 iterations overlap."""
    llm = LLM.from_models(backend, *pair, None, TREE, seed=0)
    worker = llm.worker
    worker.overlap = True
    assert eligible(worker, 3)
    assert not eligible(worker, 0)
    worker.timed = True
    assert not eligible(worker, 3)
    worker.timed = False
    attn = llm.runner.target_attn
    attn.tree_mask_mode = "full"
    assert not eligible(worker, 3)
    attn.tree_mask_mode = "tree_block"
    adaptive = LLM.from_models(backend, *pair, None, SpecConfig(3, 2, 6, adaptive=True), seed=0)
    adaptive.worker.overlap = True
    assert eligible(adaptive.worker, 3)
    assert not eligible(adaptive.worker, 0)


SCHEDULE = [3, 3, 3, 3, 5, 5, 5, 0, 0, 0, 0, 1, 1, 3, 3, 0, 5, 5, 5, 5, 5]


def count_launches_and_drops(monkeypatch):
    """Lists that grow by one per iteration launched and per iteration in flight dropped."""
    launches, dropped = [], []
    strategy = module.OverlappedSpeculative
    launch, discard = strategy._launch, strategy.discard
    monkeypatch.setattr(strategy, "_launch", lambda *a: (launches.append(1), launch(*a))[1])

    def counting_discard(self):
        if self.in_flight is not None:
            dropped.append(1)
        discard(self)

    monkeypatch.setattr(strategy, "discard", counting_discard)
    return launches, dropped



@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
@pytest.mark.parametrize("max_batch_size", [1, 3])
def test_the_adaptive_mode_overlaps_its_speculative_iterations(
    backend, graph_backend, pair, graphs, max_batch_size, monkeypatch
):
    """Depths switching between S > 0 (overlapped chains), S = 0 (overlapped plain
    decoding, the draft idle) and back (the draft catches up before the chain's first
    launch): greedy tokens equal plain decoding's, every page comes back, the controller
    sees each chain iteration once, with its accept length, and the catch-ups' time."""
    params = lengths(30, 41, 17, 25, 33)
    _, expected = run(backend, pair, PROMPTS, params, overlap=False, spec=SpecConfig(0))
    applied = []
    apply = module.OverlappedSpeculative._apply
    monkeypatch.setattr(module.OverlappedSpeculative, "_apply",
                        lambda *a: (applied.append(a[1].steps), apply(*a))[1])
    llm = scripted(graph_backend if graphs else backend, pair, SCHEDULE, graphs=graphs,
                   max_batch_size=max_batch_size)
    outputs = llm.generate(PROMPTS, params)
    assert [list(o.token_ids) for o in outputs] == [t for t, *_ in expected]
    assert llm.used_pages == 0 and llm.leaked_pages == 0
    observed = llm.worker.controller.observed
    speculative = [o for o in observed if o[0] > 0]
    assert {s for s, *_ in speculative} == {1, 3, 5}
    assert len(speculative) <= len(applied)  # a finishing read-back is not observed
    assert max(a for _, a, *_ in speculative) > 1.5  # a matching head: they speculated
    assert any(c > 0 for *_, c in speculative)  # catch-ups after S = 0 were charged
    assert llm.worker.catch_ups.catch_ups > 0
    if graphs:
        assert llm.runner.graphs.iteration_replays > 0


def test_a_change_of_depth_reads_the_chain_back_instead_of_dropping_it(backend, pair,
                                                                       monkeypatch):
    """One request: every launched iteration but the last (dropped when the request
    ends) is read back, across depth switches and the timed split pass too."""
    launches, dropped = count_launches_and_drops(monkeypatch)
    llm = scripted(backend, pair, [3, 3, 5, 5, 5, 1, 3, 3, 3])
    out = llm.generate([PROMPTS[0]], SamplingParams(max_new_tokens=80, ignore_eos=True))
    assert len(out[0].token_ids) == 80
    assert len(launches) > 10 and len(dropped) <= 1
    _, expected = run(backend, pair, [PROMPTS[0]], SamplingParams(max_new_tokens=80,
                      ignore_eos=True), overlap=False, spec=SpecConfig(0))
    assert list(out[0].token_ids) == expected[0][0]


def test_a_change_of_tree_shape_starts_a_new_chain(backend, pair):
    """The settings swapped between calls (same depth and K, another N; the draft's top-K
    is as wide as K, so K stays): the iteration in flight was laid out with the old tree
    and is read back, not continued."""
    _, expected = run(backend, pair, PROMPTS, lengths(20, 20, 20, 20, 20), overlap=False,
                      spec=SpecConfig(0))
    llm = LLM.from_models(backend, *pair, None, SpecConfig(3, 2, 6), seed=0)
    llm.worker.overlap = True
    got: dict[int, list[int]] = {}
    specs = [SpecConfig(3, 2, 6), SpecConfig(3, 2, 4), SpecConfig(3, 2, 5)]
    for step, delta in enumerate(llm.stream(PROMPTS, lengths(20, 20, 20, 20, 20))):
        got.setdefault(delta.request_id, []).extend(delta.token_ids)
        llm.worker.spec = specs[(step // 5) % 3]
    assert [got[rid] for rid in sorted(got)] == [t for t, *_ in expected]
    assert llm.used_pages == 0 and llm.leaked_pages == 0


def test_no_chain_is_started_that_cannot_continue(backend, pair, monkeypatch):
    """Up to the end of the context at most the last launch is dropped: a new chain
    starts only where its next launch fits too (else the calls could alternate between
    launching a chain and dropping it), and iterations that do not fit run without
    overlap, with the same tokens."""
    launches, dropped = count_launches_and_drops(monkeypatch)
    _, got = run(backend, pair, [PROMPTS[0]], SamplingParams(max_new_tokens=200,
                 ignore_eos=True), overlap=True, max_context=64, spec=CHAIN)
    assert len(launches) > 5 and len(dropped) <= 1
    _, expected = run(backend, pair, [PROMPTS[0]], SamplingParams(max_new_tokens=200,
                      ignore_eos=True), overlap=False, max_context=64, spec=CHAIN)
    assert got == expected


@pytest.mark.parametrize("spec", [CHAIN, WIDE], ids=["chain", "wide"])
def test_a_request_finishing_does_not_drop_the_others_iteration(backend, pair, spec,
                                                                monkeypatch):
    """Five requests finishing one by one: the iteration in flight at each batch change
    is applied to the requests still running, not dropped; only the last request's last
    launch is. Tokens as without overlap."""
    _, dropped = count_launches_and_drops(monkeypatch)
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in (12, 40, 5, 25, 33)]
    _, got, expected = both(backend, pair, PROMPTS, params, spec=spec, max_batch_size=5)
    assert got == expected
    assert len(dropped) <= 1  # the last request's last launch


def test_a_chain_drained_for_want_of_kv_pages_still_advances(backend):
    """The engine drains the iteration in flight before a step whose KV growth may not fit
    (sized for the deepest adaptive depth, more than a shallower chain reserves). The
    chain is applied, not dropped: dropped, the drain, a preemption and a new chain's
    launch-only call repeated forever (a review found the hang)."""
    target = tiny_target(seed=2, eos=(7, 11))
    pair = (target, matching_eagle1(target, noise=0.5))
    prompts = [[54, 51, 59, 32], [15, 9, 34, 10, 40, 30, 15, 39, 44, 4], [42],
               [46, 3, 16, 24, 8, 36, 45, 4, 41, 57, 48], [12, 47, 45, 21, 57, 46]]
    params = [SamplingParams(max_new_tokens=n, ignore_eos=e)
              for n, e in [(19, True), (23, True), (4, True), (7, False), (2, True)]]
    spec = SpecConfig(5, 4, 10, adaptive=True, adaptive_steps=(0, 1, 5))
    results = []
    for overlap in (False, True):
        llm = LLM.from_models(backend, *pair, None, spec, seed=0, max_batch_size=3,
                              kv_cache_tokens=100)
        llm.worker.overlap = overlap
        llm.worker.controller = ScriptedController([1])
        requests = [llm.engine.add_request(p, q) for p, q in zip(prompts, params, strict=True)]
        steps = 0
        while llm.engine.has_unfinished() and steps < 300:
            llm.engine.step()
            steps += 1
        assert not llm.engine.has_unfinished(), f"overlap={overlap}: no progress"
        assert llm.used_pages == 0 and llm.leaked_pages == 0
        results.append([list(llm.engine.output(r).token_ids) for r in requests])
    assert results[1] == results[0]
