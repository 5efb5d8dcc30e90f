"""The graph runner (``engine/graphs/runner.py``): bucketing, padding, slicing back and
eager fallback, for decode batches and for prefills padded to a token bucket, on CPU.

Oracle: greedy plain decoding of the same target through the eager CPU reference backend
(pure-torch attention, no graphs); for the padded prefills and draft extends, the same
forward run eagerly (hidden states, and K/V at the batch's own slots, every other slot
untouched). The backends under test (``graph_runner_backends``) capture with the strict
``EmulatedGraphCapture`` (``eagle_hal.testing.graphs``): a replay re-runs a snapshot of the
captured forward, so it sees the static buffers' in-place updates and nothing else, as a
device graph does; the padding, static-buffer and slicing logic is exercised exactly. Their
attention is the Triton backend (interpreted; slow, so one test) or the pure-torch one with
its own graph hooks. The draft's captured loop, a chain's and a tree's, is in
test_graph_draft_loop.py. Real capture is in tests/backends/cuda.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.api import LLM
from eagle_hal.engine.page_allocator import PADDING_PAGE
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, tiny_eagle1, tiny_target
from graph_runner_backends import (
    PARAMS,
    PROMPTS,
    BitPackedReplayingBackend,
    ReplayingTorchBackend,
    TritonCpuBackend,
    _backend,
    plain,
)

pytest.importorskip("triton")



def test_bucket_is_the_smallest_that_fits(backends, pair):
    """A batch runs in the smallest bucket >= its size; beyond the largest, none."""
    llm = LLM.from_models(backends[1], pair[0], None, spec=SpecConfig(num_steps=0))
    assert llm.runner.enable_graphs((4, 1, 2))
    graphs = llm.runner.graphs
    assert [graphs.bucket_for(b) for b in (1, 2, 3, 4, 5)] == [1, 2, 4, 4, None]


def test_no_graphs_without_capture_or_replay_hooks(backends, pair):
    """The reference backend has no graph capture: eager."""
    llm = LLM.from_models(backends[0], pair[0], None, spec=SpecConfig(num_steps=0))
    assert not llm.runner.enable_graphs() and llm.runner.graphs is None


def test_plain_decoding_padded_to_a_bucket(backends, pair):
    """Three requests decode in bucket 4 (one padded request) through the Triton attention
    and equal eager decoding."""
    target = pair[0]
    expected = plain(backends[0], target, PROMPTS)
    llm = LLM.from_models(backends[1], target, None, spec=SpecConfig(num_steps=0), seed=0)
    llm.runner.enable_graphs((1, 4))
    assert [o.token_ids for o in llm.generate(PROMPTS, PARAMS)] == expected
    assert llm.runner.graphs.replays > 0 and llm.used_pages == 0


@pytest.mark.parametrize("topk,steps,nodes", [(1, 2, 3), (2, 2, 4), (4, 3, 9)])
@pytest.mark.parametrize("masks", ["tree_block", "bit_packed"])
def test_speculative_decoding_with_graphs_is_lossless(backends, pair, topk, steps, nodes, masks):
    """Chain and tree drafting with captured draft/verify/extend forwards (the chain's
    and the tree's draft loop as one graph each) equal plain decoding; batches
    of 1 and 3, a bucket too small for 3 (eager fallback); tree-block and bit-packed
    verify masks (a captured verify's static mask takes the backend's layout)."""
    target, head = pair
    expected = plain(backends[0], target, PROMPTS)
    backend = backends[2] if masks == "tree_block" else _backend(BitPackedReplayingBackend)
    llm = LLM.from_models(backend, target, head, spec=SpecConfig(steps, topk, nodes), seed=0)
    llm.runner.enable_graphs((1, 2))
    got = [o.token_ids for o in llm.generate(PROMPTS, PARAMS)]  # batch 3: eager
    got_one = [o.token_ids for o in llm.generate(PROMPTS[:1], PARAMS)]  # batch 1: graphs
    assert got == expected and got_one == expected[:1]
    graphs = llm.runner.graphs
    modes = {key[1].value for key in graphs._graphs}
    assert {"target_verify", "draft_extend"} <= modes
    if topk == 1:  # the chain's draft loop replays as one graph
        assert graphs.chain_replays > 0 and "draft_decode" not in modes
    else:
        assert graphs.tree_replays > 0 and "draft_decode" not in modes
        assert graphs.chain_replays == 0
    assert llm.used_pages == 0


@pytest.mark.parametrize("topk,steps,nodes", [(1, 3, 4), (4, 3, 9)])
def test_a_draft_vocabulary_in_graphs_is_lossless(backends, pair, topk, steps, nodes):
    """A head drafting from 20 of the 61 tokens, its restricted lm_head and id map captured
    in the chain's and the tree's draft-loop graphs, equals plain decoding; the whole
    vocabulary in another order accepts as the unrestricted head (chain: exactly), so a
    wrong id map or wrong rows would show."""
    target, head = pair
    expected = plain(backends[0], target, PROMPTS)
    order = torch.randperm(target.config.vocab_size, generator=torch.Generator().manual_seed(2))
    accepts = {}
    for name, drafter in (("part", head.with_vocabulary(order[:20])),
                          ("permuted", head.with_vocabulary(order)), ("full", head)):
        llm = LLM.from_models(backends[2], target, drafter,
                              spec=SpecConfig(steps, topk, nodes), seed=0)
        llm.runner.enable_graphs((1, 4))
        outputs = llm.generate(PROMPTS, PARAMS)
        assert [o.token_ids for o in outputs] == expected, name
        graphs = llm.runner.graphs
        assert (graphs.chain_replays if topk == 1 else graphs.tree_replays) > 0
        assert llm.used_pages == 0
        accepts[name] = [o.accept_length for o in outputs]
    if topk == 1:
        assert accepts["permuted"] == accepts["full"]
    assert sum(accepts["part"]) < sum(accepts["full"])


# -- one-request prefills padded to a token bucket ----------------------------------------------

def _kv_snapshot(runner):
    """Every layer's K and V of both models, ``[slots, values]`` (on the host)."""
    parts = []
    for store in (runner.target_kv, runner.draft_kv):
        if store is None:
            continue
        for layer in range(store.num_layers):
            for buffer in (store.k_buffer(layer), store.v_buffer(layer)):
                by_slot = buffer if store.layout.order == "NHD" else buffer.transpose(0, 1)
                parts.append(by_slot.reshape(store.num_slots, -1).float().cpu().clone())
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("attention,with_draft", [
    ("reference", False), ("reference", True), ("triton", False),
], ids=["reference-plain", "reference-chain", "triton-plain"])
def test_prefills_padded_to_a_token_bucket_equal_eager(backends, attention, with_draft):
    """One request at a time, prompts of 5, 30, 40 and 20 tokens prefill from token bucket
    graphs (16, 32, 64, 32: the target's and, with a head, the draft's extend over the
    prompt) and decode the tokens the eager reference backend gives. The 20-token prompt
    prefills in bucket 32 while the 30-token one that used it before still runs: the
    padding tokens after its 20 write their K/V to the padding slot, not to the slots of
    the 30-token prompt's last 10 tokens (the static buffer's stale entries)."""
    target = tiny_target(seed=11, vocab=61)
    head = matching_eagle1(target, noise=0.02) if with_draft else None
    spec = SpecConfig(num_steps=3, topk=1) if with_draft else SpecConfig(num_steps=0)
    prompts = [list(range(1, 6)), [(7 * i) % 61 for i in range(30)],
               [(3 * i + 1) % 61 for i in range(40)], [(5 * i + 2) % 61 for i in range(20)]]
    expected = plain(backends[0], target, prompts)
    backend = backends[1] if attention == "triton" else backends[2]
    llm = LLM.from_models(backend, target, head, spec=spec, seed=0, max_batch_size=4)
    llm.runner.enable_graphs((1, 2, 4))
    graphs, engine = llm.runner.graphs, llm.engine
    # the 30-token request runs while the others join one by one (each prefills alone)
    requests = [engine.add_request(prompts[0], PARAMS)]
    engine.step()
    requests.append(engine.add_request(prompts[1], PARAMS))
    engine.step()
    requests.append(engine.add_request(prompts[2], PARAMS))
    engine.step()
    before = _kv_snapshot(llm.runner)
    requests.append(engine.add_request(prompts[3], PARAMS))
    engine.step()  # the 20-token prefill, in bucket 32 after the 30-token one
    after = _kv_snapshot(llm.runner)
    runner = llm.runner
    own = set(runner.table.slots(requests[3].table_row, 0, len(prompts[3])))
    others = [s for s in range(after.shape[0]) if s not in own and s != graphs.pad_slot]
    assert torch.equal(after[others], before[others]), "a padded prefill wrote another's KV"
    engine.run()
    assert [engine.output(r, None).token_ids for r in requests] == expected
    padded = {key[3] for key in graphs._graphs if key[2] == "padded"}
    assert padded == {16, 32, 64}
    # each prefill alone: target and (with a head) draft extend from a bucket graph
    assert graphs.prefill_replays == 4 * (2 if with_draft else 1)
    assert llm.used_pages == 0


def _draft_extend_equals_eager(runner, graphs, rows, prefixes, counts, generator, page_size,
                               replayed):
    """One DRAFT_EXTEND of random tokens and features, ``counts[b]`` after ``prefixes[b]``
    in table row ``rows[b]``, run eagerly and then through ``graphs`` as a prefill-type
    extend: the same hidden states and K/V at the batch's own slots, every other slot
    but the padding page untouched, and one more token bucket replay when ``replayed``."""
    from eagle_hal.hal.attention import ForwardMode

    for row, prefix, count in zip(rows, prefixes, counts, strict=False):
        runner.table.reserve(row, prefix + count)
    runner.sync_table()
    total = sum(counts)
    ids = torch.randint(61, (total,), generator=generator).tolist()
    features = torch.randn(total, runner.draft.config.hidden_size, generator=generator)
    batch = runner.causal_batch(ForwardMode.DRAFT_EXTEND, ids, list(rows), list(prefixes),
                                list(counts))
    before = _kv_snapshot(runner)
    runner.graphs = None
    eager = runner.run_draft(batch, features, prefill=True)
    eager_kv = _kv_snapshot(runner)
    runner.graphs = graphs
    replays = graphs.prefill_replays
    got = runner.run_draft(batch, features, prefill=True)
    assert graphs.prefill_replays == replays + int(replayed)
    torch.testing.assert_close(got, eager, atol=1e-5, rtol=1e-5)
    graph_kv = _kv_snapshot(runner)
    own = [s for row, prefix, count in zip(rows, prefixes, counts, strict=False)
           for s in runner.table.slots(row, prefix, prefix + count)]
    torch.testing.assert_close(graph_kv[own], eager_kv[own], atol=1e-5, rtol=1e-5)
    others = [s for s in range(before.shape[0]) if s not in set(own)
              and s // page_size != PADDING_PAGE]
    assert torch.equal(graph_kv[others], before[others])


@pytest.mark.parametrize("page_size", [1, 16])
def test_padded_draft_extends_after_a_prefix_equal_eager(page_size):
    """The draft's extends as a catch-up runs them (one request, a prefix of earlier
    tokens, lengths that vary), through a random head whose output depends on attention:
    7 tokens after 20, then 3 after 27 in the same bucket (stale padding slots), give the
    eager forward's hidden states and K/V at their own slots and leave every other slot
    as it was; a run whose padded length would pass the end of the row runs eagerly."""
    target = tiny_target(seed=11, vocab=61)
    head = tiny_eagle1(target, seed=12)
    llm = LLM.from_models(_backend(ReplayingTorchBackend), target, head,
                          spec=SpecConfig(num_steps=3, topk=1), seed=0, page_size=page_size,
                          max_context=64)
    llm.runner.enable_graphs((1,))
    runner, graphs = llm.runner, llm.runner.graphs
    request = llm.engine.add_request([(5 * i + 2) % 61 for i in range(20)],
                                     SamplingParams(max_new_tokens=32))
    llm.engine.step()  # the prompt's prefill: rows and draft K/V for positions 0..19
    row, width = request.table_row, runner.draft_attn.config.req_to_token.shape[1]
    generator = torch.Generator().manual_seed(7)
    for prefix, count, padded in ((20, 7, True), (27, 3, True), (width - 5, 4, False)):
        _draft_extend_equals_eager(runner, graphs, [row], [prefix], [count], generator,
                                   page_size, replayed=padded)


def test_ragged_prefills_of_several_prompts_equal_eager(backends):
    """Through the Triton attention (``ragged_extend_graphs``), prompts prefilled together
    replay from one token bucket graph per model: 5 + 30 + 12 tokens (bucket 64), then,
    while those run, 20 + 15 (bucket 64 again, over the static batch the three left: a
    stale third request and longer token runs). Both models' extends replay (4 in all),
    the tokens are the eager reference's, and the second prefill writes no K/V but its
    own requests' and the padding slot's."""
    target = tiny_target(seed=11, vocab=61)
    head = matching_eagle1(target, noise=0.02)
    first = [list(range(1, 6)), [(7 * i) % 61 for i in range(30)],
             [(3 * i + 1) % 61 for i in range(12)]]
    second = [[(5 * i + 2) % 61 for i in range(20)], [(11 * i + 4) % 61 for i in range(15)]]
    expected = plain(backends[0], target, first + second)
    llm = LLM.from_models(backends[1], target, head, spec=SpecConfig(num_steps=3, topk=1),
                          seed=0, max_batch_size=8)
    llm.runner.enable_graphs((1, 2, 4, 8))
    runner, graphs, engine = llm.runner, llm.runner.graphs, llm.engine
    requests = [engine.add_request(p, PARAMS) for p in first]
    engine.step()  # one prefill of three prompts
    assert graphs.prefill_replays == 2
    before = _kv_snapshot(runner)
    requests += [engine.add_request(p, PARAMS) for p in second]
    engine.step()  # one prefill of two prompts, in the same bucket
    assert graphs.prefill_replays == 4
    after = _kv_snapshot(runner)
    own = {s for r, p in zip(requests[3:], second, strict=False)
           for s in runner.table.slots(r.table_row, 0, len(p))}
    others = [s for s in range(after.shape[0]) if s not in own and s != graphs.pad_slot]
    assert torch.equal(after[others], before[others]), "a ragged prefill wrote another's KV"
    engine.run()
    assert [engine.output(r, None).token_ids for r in requests] == expected
    padded = {(key[0], key[3]) for key in graphs._graphs if key[2] == "padded"}
    assert padded == {("target", 64), ("draft", 64)}
    assert llm.used_pages == 0


def test_ragged_draft_extends_after_prefixes_equal_eager():
    """The draft's extends as a catch-up runs them (several requests, prefixes, lengths
    that vary) through the Triton attention's ragged replays and a random head whose
    output depends on attention: 7 + 5 tokens after prefixes of 20 and 9, then 3 + 2 in
    the same bucket (stale token runs), then 4 tokens of one request whose padded length
    would pass the end of its row (the padding is a request of its own here: it replays)
    give the eager forward's hidden states and K/V at their own slots, and leave every
    other slot as it was."""
    target = tiny_target(seed=11, vocab=61)
    head = tiny_eagle1(target, seed=12)
    llm = LLM.from_models(_backend(TritonCpuBackend), target, head,
                          spec=SpecConfig(num_steps=3, topk=1), seed=0, page_size=16,
                          max_context=64, max_batch_size=2)
    llm.runner.enable_graphs((1, 2))
    runner, graphs = llm.runner, llm.runner.graphs
    params = SamplingParams(max_new_tokens=32)
    first = llm.engine.add_request([(5 * i + 2) % 61 for i in range(20)], params)
    second = llm.engine.add_request([(3 * i + 1) % 61 for i in range(9)], params)
    llm.engine.step()  # the prompts' prefill: rows and draft K/V up to 20 and 9
    rows = [first.table_row, second.table_row]
    width = runner.draft_attn.config.req_to_token.shape[1]
    generator = torch.Generator().manual_seed(7)
    for prefixes, counts in (((20, 9), (7, 5)), ((27, 14), (3, 2)), ((width - 5,), (4,))):
        _draft_extend_equals_eager(runner, graphs, rows[: len(prefixes)], prefixes, counts,
                                   generator, 16, replayed=True)


def test_prefill_graphs_can_be_turned_off(backends):
    """``prefill_graphs=False``: one-request prefills run eagerly."""
    target = tiny_target(seed=11, vocab=61)
    llm = LLM.from_models(backends[2], target, None, spec=SpecConfig(num_steps=0), seed=0)
    llm.runner.enable_graphs((1, 2), prefill_graphs=False)
    got = [o.token_ids for o in llm.generate(PROMPTS[:1], PARAMS)]
    assert got == plain(backends[0], target, PROMPTS[:1])
    assert llm.runner.graphs.prefill_replays == 0


def test_prompts_past_the_largest_token_bucket_prefill_eagerly(backends):
    """A prompt longer than the largest token bucket, and several prompts at once, run
    eagerly (no graph of their lengths either) and still decode as the reference does."""
    from eagle_hal.engine.graphs.runner import PREFILL_BUCKETS

    target = tiny_target(seed=11, vocab=61)
    long_prompt = [(i * 13 + 5) % 61 for i in range(PREFILL_BUCKETS[-1] + 3)]
    prompts = [long_prompt, PROMPTS[1]]
    llm = LLM.from_models(backends[2], target, None, spec=SpecConfig(num_steps=0), seed=0,
                          max_context=1024)
    llm.runner.enable_graphs((1, 2))
    assert [o.token_ids for o in llm.generate(prompts[:1], PARAMS)] == plain(
        backends[0], target, prompts[:1], max_context=1024)
    assert llm.runner.graphs.prefill_replays == 0
    llm.generate(prompts, PARAMS)  # two prompts in one prefill
    assert llm.runner.graphs.prefill_replays == 0
    assert not any(key[1].value == "extend" for key in llm.runner.graphs._graphs)
