"""The EAGLE worker is lossless: speculative output equals plain decoding.

Oracle: plain greedy decoding of the same target with no draft at all (one DECODE forward
per token). Targets and heads are tiny random Llamas in float32 on the CPU backend.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target, tiny_eagle1, tiny_target

PROMPTS = [
    [1, 2, 3, 4, 5],
    [7, 8, 9],
    list(range(10, 40)),
    [42],
    [5, 5, 5, 5, 6, 6, 6, 6, 7],
    list(range(60, 20, -3)),
]

# (topk K, steps S, draft tokens N): K in {1, 2, 4}, S in 1..6, N in 2..16
SETTINGS = [
    (1, 1, 2), (1, 3, 4), (1, 6, 7), (2, 1, 3), (2, 2, 4), (2, 4, 8),
    (2, 6, 13), (4, 1, 5), (4, 3, 16), (4, 6, 16), (4, 2, 9),
]


def _plain(backend, target, prompts, params):
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0))
    return llm.generate(prompts, params)


@pytest.fixture(scope="module")
def random_pair():
    target = tiny_target(seed=11)
    return target, tiny_eagle1(target, seed=12)


@pytest.fixture(scope="module")
def good_pair():
    target = near_bigram_target(seed=5)
    return target, matching_eagle1(target, noise=0.02)


@pytest.mark.parametrize("topk,steps,nodes", SETTINGS)
def test_greedy_lossless_with_random_head(cpu_backend, random_pair, topk, steps, nodes):
    """A random head changes nothing but speed: same tokens, accept length near 1."""
    target, head = random_pair
    params = SamplingParams(max_new_tokens=24)
    expected = _plain(cpu_backend, target, PROMPTS, params)
    llm = LLM.from_models(cpu_backend, target, head, spec=SpecConfig(steps, topk, nodes))
    outputs = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in outputs] == [e.token_ids for e in expected]
    mean_accept = sum(o.accept_length for o in outputs) / len(outputs)
    assert mean_accept < 1.6
    assert llm.used_pages == 0


@pytest.mark.parametrize("topk,steps,nodes", SETTINGS)
def test_greedy_lossless_with_good_head(cpu_backend, good_pair, topk, steps, nodes):
    """A head that guesses well gets long accepted paths, and still the same tokens."""
    target, head = good_pair
    params = SamplingParams(max_new_tokens=40)
    expected = _plain(cpu_backend, target, PROMPTS, params)
    llm = LLM.from_models(cpu_backend, target, head, spec=SpecConfig(steps, topk, nodes))
    outputs = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in outputs] == [e.token_ids for e in expected]
    mean_accept = sum(o.accept_length for o in outputs) / len(outputs)
    assert mean_accept > 1.0 + 0.25 * min(steps, 3)
    assert llm.used_pages == 0


@pytest.mark.parametrize("batch_size", [1, 2, 7, 16])
def test_lossless_across_batch_sizes(cpu_backend, good_pair, batch_size):
    """Batches of 1 to 16 mixed-length prompts decode exactly as plain decoding."""
    target, head = good_pair
    prompts = [PROMPTS[i % len(PROMPTS)][: 1 + (3 * i) % 11] for i in range(batch_size)]
    params = SamplingParams(max_new_tokens=20)
    expected = _plain(cpu_backend, target, prompts, params)
    llm = LLM.from_models(cpu_backend, target, head, spec=SpecConfig(4, 2, 8), max_batch_size=16)
    assert [o.token_ids for o in llm.generate(prompts, params)] == [e.token_ids for e in expected]


def test_adaptive_mode_is_lossless(cpu_backend, random_pair):
    """The adaptive controller changes S on the fly; the tokens stay those of plain decoding."""
    target, head = random_pair
    params = SamplingParams(max_new_tokens=48)
    expected = _plain(cpu_backend, target, PROMPTS, params)
    spec = SpecConfig(num_steps=4, topk=2, num_draft_tokens=6, adaptive=True,
                      adaptive_steps=(0, 2, 4))
    llm = LLM.from_models(cpu_backend, target, head, spec=spec)
    assert [o.token_ids for o in llm.generate(PROMPTS, params)] == [e.token_ids for e in expected]
    assert llm.used_pages == 0


@pytest.mark.parametrize("overlap", [False, True], ids=["eager", "overlapped"])
def test_adaptive_mode_narrowed_by_its_verify_budget_is_lossless(cpu_backend, good_pair, overlap):
    """With a verify budget of 12 tokens a batch of 5 (bucket 8) runs its K = 2 trees at
    N = S + 1 (S = 4: 12 // 8 = 1 is below S + 1 = 5), a batch of 1 at N = 8, and a batch
    shrinking from 5 to 1 passes from one to the other mid-run; the tokens stay those of
    plain decoding (oracle), and the narrowed shapes did run."""
    target, head = good_pair
    params = [SamplingParams(max_new_tokens=n) for n in (40, 12, 26, 7, 33)]
    expected = _plain(cpu_backend, target, PROMPTS[:5], params)
    spec = SpecConfig(4, 2, 8, adaptive=True, adaptive_steps=(0, 2, 4), adaptive_verify_budget=12)
    llm = LLM.from_models(cpu_backend, target, head, spec=spec, max_batch_size=8, seed=0)
    llm.worker.overlap = overlap
    outputs = llm.generate(PROMPTS[:5], params)
    assert [o.token_ids for o in outputs] == [e.token_ids for e in expected]
    shapes = {key: (s.num_steps, s.topk, s.draft_tokens)
              for key, s in llm.worker.context.all_shapes.items()}
    assert any(bucket == 8 and shape[2] == shape[0] + 1 for (_, bucket), shape in shapes.items()
               if shape[0] > 0), shapes
    assert llm.used_pages == 0


@pytest.mark.parametrize("params", [
    SamplingParams(max_new_tokens=16),
    SamplingParams(max_new_tokens=16, temperature=0.8, top_k=20, seed=1234),
])
def test_batch_invariance(cpu_backend, good_pair, params):
    """A request's output does not depend on what else is in its batch (float32)."""
    target, head = good_pair
    spec = SpecConfig(3, 2, 6)
    probe = [3, 1, 4, 1, 5, 9, 2, 6]
    alone = LLM.from_models(cpu_backend, target, head, spec=spec, seed=0).generate(
        [probe], params
    )[0]
    others = [PROMPTS[i % len(PROMPTS)][: 2 + i] for i in range(9)]
    llm = LLM.from_models(cpu_backend, target, head, spec=spec, seed=0, max_batch_size=16)
    crowded = llm.generate(others[:4] + [probe] + others[4:], params)[4]
    assert crowded.token_ids == alone.token_ids


@pytest.mark.parametrize("spec", [SpecConfig(2, 2, 4), SpecConfig(3, 4, 8, adaptive=True)])
def test_prefills_capture_no_graph_per_length(random_pair, spec):
    """Prefills of prompts of different lengths share their token bucket's graphs (the
    target's and the draft's extend over the prompt): the first prompt captures the two,
    later lengths in the bucket capture none. A graph per prompt length would be captured
    for nearly every request."""
    from eagle_hal.testing.graphs import replaying_cpu_backend

    backend = replaying_cpu_backend()
    target, head = random_pair
    llm = LLM.from_models(backend, target, head, spec=spec, max_batch_size=2, seed=0)
    assert llm.runner.enable_graphs()
    prefill, graphs_after_prefill = llm.worker.prefill, []

    def counting_prefill(requests):
        emitted = prefill(requests)
        graphs_after_prefill.append(llm.runner.graphs.num_graphs)
        return emitted

    llm.worker.prefill = counting_prefill
    for length in (3, 5, 8):  # token bucket 16
        count_before = llm.runner.graphs.num_graphs
        llm.generate([list(range(1, 1 + length))], SamplingParams(max_new_tokens=1))
        assert graphs_after_prefill[-1] == count_before + (2 if length == 3 else 0)
    assert llm.runner.graphs.prefill_replays == 6


def test_adaptive_iterations_build_each_depths_settings_once(cpu_backend, random_pair, monkeypatch):
    """The per-iteration host work of the adaptive mode stays that of plain decoding: the
    settings of each depth are built once, not once per iteration. A scripted controller
    (timing-free) cycles through every depth for a hundred iterations."""
    import itertools

    target, head = random_pair
    spec = SpecConfig(3, 2, 4, adaptive=True)
    llm = LLM.from_models(cpu_backend, target, head, spec=spec, max_batch_size=4, seed=0)
    depths = itertools.cycle(spec.adaptive_steps)

    class Cycling:
        def choose(self, batch_size):
            return next(depths)

        def observe(self, *args, **kwargs):
            pass

    llm.worker.controller = Cycling()
    built = []
    init = SpecConfig.__init__

    def counting_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self.num_steps)

    monkeypatch.setattr(SpecConfig, "__init__", counting_init)
    llm.generate(PROMPTS[:4], SamplingParams(max_new_tokens=100, ignore_eos=True))
    ran = llm.worker.iterations_at_depth
    assert set(ran) == set(spec.adaptive_steps) and min(ran.values()) >= 10
    assert sorted(built) == sorted(set(built)) and len(built) <= len(spec.adaptive_steps)


def test_a_swapped_spec_is_the_one_iterations_run(cpu_backend, random_pair):
    """Replacing ``worker.spec`` (as the bench's warm-up does) takes effect at once: the
    per-depth settings are rebuilt, not served from the previous spec's. A tree spec
    swapped for a chain of the same depth drafts one branch (oracle: the branch count the
    draft's DRAFT_DECODE forwards see) and still decodes as plain greedy decoding does."""
    from eagle_hal.hal.attention import ForwardMode

    target, head = random_pair
    llm = LLM.from_models(cpu_backend, target, head, spec=SpecConfig(3, 2, 6), seed=0)
    params = SamplingParams(max_new_tokens=12)
    llm.generate([PROMPTS[0]], params)  # the tree's settings are built and used
    branches = []
    forward = llm.runner.draft.forward

    def recording_forward(batch, *args, **kwargs):
        if batch.mode is ForwardMode.DRAFT_DECODE:
            branches.append(batch.num_branches)
        return forward(batch, *args, **kwargs)

    llm.runner.draft.forward = recording_forward
    llm.worker.spec = SpecConfig(3, 1)
    chained = llm.generate([PROMPTS[0]], params)[0]
    plain = LLM.from_models(cpu_backend, target, None, spec=SpecConfig(num_steps=0), seed=0)
    assert chained.token_ids == plain.generate([PROMPTS[0]], params)[0].token_ids
    assert branches and set(branches) == {1}


@pytest.mark.parametrize("topk,steps,nodes", [(1, 4, 5), (4, 3, 16)])
def test_a_draft_vocabulary_changes_no_token(cpu_backend, good_pair, topk, steps, nodes):
    """A head drafting from part of the vocabulary (``with_vocabulary``) yields plain
    decoding's tokens and accepts less; the whole vocabulary in another order drafts as
    the unrestricted head does (chain: the same accept lengths)."""
    target, head = good_pair
    params = SamplingParams(max_new_tokens=24)
    expected = [e.token_ids for e in _plain(cpu_backend, target, PROMPTS, params)]
    spec = SpecConfig(steps, topk, nodes)
    order = torch.randperm(target.config.vocab_size, generator=torch.Generator().manual_seed(4))
    runs = {}
    for name, drafter in (("full", head), ("permuted", head.with_vocabulary(order)),
                          ("part", head.with_vocabulary(order[:20]))):
        outputs = LLM.from_models(cpu_backend, target, drafter, spec=spec).generate(PROMPTS, params)
        assert [o.token_ids for o in outputs] == expected, name
        runs[name] = [o.accept_length for o in outputs]
    mean = {name: sum(a) / len(a) for name, a in runs.items()}
    if topk == 1:
        assert runs["permuted"] == runs["full"]
    else:  # tree scores may round apart between the two layouts of the same logits
        assert abs(mean["permuted"] - mean["full"]) < 0.05
    assert mean["part"] < mean["full"] - 0.5
