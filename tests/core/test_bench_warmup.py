"""Tests for the bench's warm-up (eagle_hal.commands.bench_warmup) on CPU with tiny models:
the timed runs capture no graph and run no controller warm-up iteration. Oracles: graph
counts and controller phases recorded around the timed run, and a fresh engine warmed up
less, which does capture (or warm up) while timed, so that each check can fail.
"""

from __future__ import annotations

import pytest
from eagle_hal import select_backend
from eagle_hal.commands import bench, bench_warmup
from eagle_hal.testing.models import matching_eagle1, near_bigram_target


@pytest.mark.parametrize("mode", ["plain", "chain", "tree", "adaptive"])
def test_warm_up_captures_every_graph_the_timed_run_replays(mode):
    """The timed run shrinks from 4 requests to 1 as they finish; the warm-up (one short
    generation per bucket up to the batch size, adaptive: also one per depth the controller
    may probe) has captured every graph it needs, so no capture happens while it is timed.
    Warming up at the batch size only would not."""
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.testing.graphs import replaying_cpu_backend

    backend = replaying_cpu_backend()
    target = near_bigram_target(seed=5)
    draft = None if mode == "plain" else matching_eagle1(target, noise=0.02)
    config = bench.BenchConfig(batch_sizes=(4,), max_new_tokens=6, steps=2, topk=2,
                               draft_tokens=4)
    llm = LLM.from_models(backend, target, draft, spec=config.spec_for(mode),
                          max_batch_size=4, max_context=256, seed=0)
    assert llm.runner.enable_graphs()
    smaller = sorted((b for b in llm.runner.graphs.buckets if b < 4), reverse=True)
    assert bench_warmup.warm_up_sizes(llm, 4) == [4, *smaller] and 1 in smaller
    graphs_at_call = []  # graphs held when the timed run starts
    stream = llm.stream

    def counting_stream(prompts, params):
        graphs_at_call.append(llm.runner.graphs.num_graphs)
        yield from stream(prompts, params)

    llm.stream = counting_stream
    # 4, then 1; the last prompt's length is new to the timed run (its prefill runs eagerly)
    prompts = [[1, 2, 3], [7, 8, 9, 10], [20, 21], [5, 6], [30, 31, 32, 33, 34]]
    row = bench._measure(llm, prompts, SamplingParams(max_new_tokens=6), 4, split=False)
    assert llm.runner.graphs.num_graphs == graphs_at_call[-1] > 0  # none during the timed run
    assert row["captures_while_timed"] == 0
    # the oracle that this can fail: a fresh engine warmed at 4 only captures while timed
    fresh = LLM.from_models(backend, target, draft, spec=config.spec_for(mode),
                            max_batch_size=4, max_context=256, seed=0)
    fresh.runner.enable_graphs()
    fresh.generate(prompts[:4], SamplingParams(max_new_tokens=6))
    before = fresh.runner.graphs.num_graphs
    fresh.generate(prompts, SamplingParams(max_new_tokens=6))
    assert fresh.runner.graphs.num_graphs > before


@pytest.mark.parametrize("batch_size,num_prompts,new_tokens,matching",
                         [(4, 8, 16, False), (8, 10, 12, True)])
def test_adaptive_controller_is_settled_before_the_timed_run(batch_size, num_prompts,
                                                              new_tokens, matching):
    """The warm-up (EOS ignored, repeated until the controller settles, at every controller
    bucket below the batch size) leaves no warm-up iteration of the controller, deep depths
    first, to the timed run: with requests that stop at EOS after a few tokens, and with a
    well-matched head whose requests accept different lengths and so finish apart, which
    opens smaller buckets, with warm-ups of their own, before the batch's bucket settles.
    No device graphs here: the graph buckets do not stand in for the controller's. One
    short warm-up generation leaves some (the oracle that this can fail)."""
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.testing.models import tiny_eagle1, tiny_target

    if matching:  # requests accept different lengths, so they finish apart
        target = near_bigram_target(seed=5)
        head = matching_eagle1(target, noise=0.02)
    else:
        target = tiny_target(seed=3, eos=tuple(range(60, 97)))  # EOS: about 2 tokens in 5
        head = tiny_eagle1(target)
    config = bench.BenchConfig(modes=("adaptive",), batch_sizes=(batch_size,),
                               max_new_tokens=new_tokens, steps=3, topk=2, draft_tokens=4)
    prompts = [[1 + i, 2 + i, 3 + i] for i in range(num_prompts)]
    params = SamplingParams(max_new_tokens=new_tokens)

    def timed_warm_up_iterations(warm_up) -> tuple[int, int]:
        llm = LLM.from_models(select_backend("cpu"), target, head,
                              spec=config.spec_for("adaptive"), max_batch_size=batch_size,
                              max_context=256, seed=0)
        assert llm.runner.graphs is None
        controller, phases = llm.worker.controller, []
        observe = controller.observe

        def recording_observe(size, steps, *args):
            phases.append(not controller.is_settled(size))
            return observe(size, steps, *args)

        controller.observe = recording_observe
        warm_up(llm)
        phases.clear()
        llm.generate(prompts, params)
        return sum(phases), len(phases)

    def bench_warm_up(llm):
        bench._measure(llm, prompts, params, batch_size, split=False)

    warming, iterations = timed_warm_up_iterations(bench_warm_up)
    assert iterations > 0 and warming == 0
    # the oracle that this can fail: one short warm-up generation that honours EOS
    warming, _ = timed_warm_up_iterations(
        lambda llm: llm.generate(prompts[:batch_size], params))
    assert warming > 0
