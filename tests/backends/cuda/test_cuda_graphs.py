"""The CUDA backend on a real GPU: captured forwards replay exactly, speculation is lossless.

Oracle: greedy plain decoding of the same float32 target on the same backend without
graphs. Skipped cleanly where no CUDA device is visible.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

pytestmark = pytest.mark.gpu

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], list(range(10, 40)), [42], list(range(60, 20, -3))]
PARAMS = SamplingParams(max_new_tokens=24)


@pytest.fixture(scope="module")
def pair(cuda_backend):
    target = near_bigram_target(seed=5, device=cuda_backend.torch_device)
    return target, matching_eagle1(target, noise=0.02)


def generate(backend, target, draft, spec, prompts, graphs, chain_graphs=True):
    llm = LLM.from_models(backend, target, draft, spec=spec, seed=0)
    if graphs:
        assert llm.runner.enable_graphs(chain_graphs=chain_graphs)
    outputs = llm.generate(prompts, PARAMS)
    assert llm.used_pages == 0
    return [o.token_ids for o in outputs], llm


def test_backend_pieces(cuda_backend):
    """Triton attention, fused sampling ops, CUDA-graph capture, tree_block masks."""
    from eagle_hal.ops.triton import TritonSamplingOps

    assert isinstance(cuda_backend.sampling_ops(), TritonSamplingOps)
    assert cuda_backend.graph_capture() is not None
    assert cuda_backend.capabilities.graph_capture


@pytest.mark.parametrize("batch", [1, 5])
def test_plain_decoding_with_graphs_equals_eager(cuda_backend, pair, batch):
    """Captured plain decoding (padded to its bucket) gives eager decoding's tokens."""
    target = pair[0]
    spec = SpecConfig(num_steps=0)
    expected, _ = generate(cuda_backend, target, None, spec, PROMPTS[:batch], graphs=False)
    got, llm = generate(cuda_backend, target, None, spec, PROMPTS[:batch], graphs=True)
    assert got == expected and llm.runner.graphs.replays > 0


@pytest.mark.parametrize("max_batch_size", [1, 2, 16])
def test_overlapped_plain_decoding_equals_step_by_step(cuda_backend, pair, max_batch_size):
    """One iteration in flight (spec/overlap.py, on by default on CUDA) gives the tokens of
    decoding that reads each iteration back before the next, as requests join and finish."""
    target = pair[0]
    params = [SamplingParams(max_new_tokens=n) for n in (24, 7, 31, 3, 18)]
    outputs = []
    for overlap in (False, True):
        llm = LLM.from_models(cuda_backend, target, None, spec=SpecConfig(num_steps=0), seed=0,
                              max_batch_size=max_batch_size)
        assert llm.worker.overlap  # the default on a GPU
        llm.worker.overlap = overlap
        assert llm.runner.enable_graphs()
        outputs.append([o.token_ids for o in llm.generate(PROMPTS, params)])
        assert llm.used_pages == 0
    assert outputs[1] == outputs[0]
    assert [len(t) for t in outputs[1]] == [24, 7, 31, 3, 18]


@pytest.mark.parametrize("topk,steps,nodes", [(1, 5, 6), (4, 5, 16)])
@pytest.mark.parametrize("max_batch_size", [1, 2, 16])
def test_overlapped_speculation_equals_speculation_read_back_each_iteration(
    cuda_backend, pair, topk, steps, nodes, max_batch_size
):
    """Speculative iterations chained on the device, one in flight
    (speculative/speculative_overlap.py, on by default on CUDA), give the tokens and the
    verify passes of iterations read back one by one, as requests join and finish (float32)."""
    target, head = pair
    params = [SamplingParams(max_new_tokens=n) for n in (40, 7, 31, 3, 18)]
    outputs = []
    for overlap in (False, True):
        llm = LLM.from_models(cuda_backend, target, head, spec=SpecConfig(steps, topk, nodes),
                              seed=0, max_batch_size=max_batch_size)
        assert llm.worker.overlap  # the default on a GPU
        llm.worker.overlap = overlap
        assert llm.runner.enable_graphs()
        assert (llm.worker.overlap and llm.worker.speculative.eligible(steps)) == overlap
        out = llm.generate(PROMPTS, params)
        outputs.append([(o.token_ids, o.stats.verify_steps) for o in out])
        assert llm.used_pages == 0 and llm.leaked_pages == 0
    assert outputs[1] == outputs[0]
    assert [len(t) for t, _ in outputs[1]] == [40, 7, 31, 3, 18]


@pytest.mark.parametrize("max_batch_size", [1, 5])
def test_adaptive_overlapped_speculation_equals_plain_decoding(cuda_backend, pair,
                                                               max_batch_size):
    """The adaptive mode's iterations at S > 0 overlapped too, switching depth on a fixed
    schedule (chains read back at each switch, the draft catching up after S = 0), with
    graphs: the tokens of plain decoding (float32), every page back."""
    from eagle_hal.testing.adaptive import ScriptedController

    target, head = pair
    params = [SamplingParams(max_new_tokens=n) for n in (40, 7, 31, 3, 18)]
    plain = LLM.from_models(cuda_backend, target, None, spec=SpecConfig(num_steps=0), seed=0)
    expected = [list(o.token_ids) for o in plain.generate(PROMPTS, params)]
    spec = SpecConfig(3, 4, 16, adaptive=True, adaptive_steps=(0, 1, 3, 5))
    llm = LLM.from_models(cuda_backend, target, head, spec=spec, seed=0,
                          max_batch_size=max_batch_size)
    assert llm.runner.enable_graphs() and llm.worker.overlap
    controller = llm.worker.controller = ScriptedController([3, 3, 3, 5, 5, 0, 0, 0, 1, 1, 5])
    out = llm.generate(PROMPTS, params)
    got = [list(o.token_ids) for o in out]
    assert got == expected
    assert [len(t) for t in got] == [40, 7, 31, 3, 18]
    assert llm.used_pages == 0 and llm.leaked_pages == 0
    # chains broken by requests finishing are dropped unobserved, so not every depth is seen
    assert len({s for s, *_ in controller.observed if s > 0}) >= 2
    assert llm.runner.graphs.iteration_replays > 0


@pytest.mark.parametrize("topk,steps,nodes", [(1, 3, 4), (4, 3, 16), (2, 4, 8)])
@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("chain_graph", [False, True])
def test_speculation_with_graphs_is_lossless(cuda_backend, pair, topk, steps, nodes, batch,
                                             chain_graph):
    """EAGLE with captured draft/verify/extend forwards equals plain decoding (float32);
    by default a chain's whole draft loop replays as one graph, with
    ``chain_graphs=False`` step by step."""
    target, head = pair
    expected, _ = generate(cuda_backend, target, None, SpecConfig(num_steps=0),
                           PROMPTS[:batch], graphs=False)
    got, llm = generate(cuda_backend, target, head, SpecConfig(steps, topk, nodes),
                        PROMPTS[:batch], graphs=True, chain_graphs=chain_graph)
    assert got == expected and llm.runner.graphs.num_graphs > 0
    assert (llm.runner.graphs.chain_replays > 0) == (topk == 1 and chain_graph)


@pytest.mark.parametrize("topk,steps,nodes", [(1, 4, 5), (4, 3, 16)])
@pytest.mark.parametrize("batch", [1, 5])
def test_a_draft_vocabulary_with_graphs_is_lossless(cuda_backend, pair, topk, steps, nodes, batch):
    """A head drafting from 20 of the target's 61 tokens (its lm_head rows and id map in the
    captured draft loop, the verify-to-extend graph and the Triton top-k over 20 logits)
    equals plain decoding, and accepts less than the head over the whole vocabulary; the
    whole vocabulary in another order accepts as the unrestricted head (chain)."""
    target, head = pair
    expected, _ = generate(cuda_backend, target, None, SpecConfig(num_steps=0),
                           PROMPTS[:batch], graphs=False)
    order = torch.randperm(target.config.vocab_size, generator=torch.Generator().manual_seed(4))
    part = head.with_vocabulary(order[:20])
    accept = {}
    for name, drafter in (("part", part), ("permuted", head.with_vocabulary(order)),
                          ("full", head)):
        llm = LLM.from_models(cuda_backend, target, drafter,
                              spec=SpecConfig(steps, topk, nodes), seed=0)
        assert llm.runner.enable_graphs()
        outputs = llm.generate(PROMPTS[:batch], PARAMS)
        assert [o.token_ids for o in outputs] == expected and llm.runner.graphs.num_graphs > 0
        accept[name] = sum(o.accept_length for o in outputs)
    assert accept["part"] < accept["full"]
    if topk == 1:  # a wrong id map or wrong rows would change what the chain drafts
        assert accept["permuted"] == accept["full"]


@pytest.mark.parametrize("batch", [1, 5])
def test_tree_graph_captured_after_its_verify_graph_is_lossless(cuda_backend, pair, batch):
    """The tree loop as one graph (on by default) at two depths sharing one verify
    shape: the S = 2 tree graph is captured after the verify graph S = 3 captured for the
    same N, in the shared CUDA-graph pool (the adaptive mode's probes do this; an H200 run
    crashed on it while the tree's outputs lived in the pool). Both equal plain decoding."""
    target, head = pair
    expected, _ = generate(cuda_backend, target, None, SpecConfig(num_steps=0),
                           PROMPTS[:batch], graphs=False)
    llm = LLM.from_models(cuda_backend, target, head, spec=SpecConfig(3, 4, 16), seed=0)
    assert llm.runner.enable_graphs()
    for spec in (SpecConfig(3, 4, 16), SpecConfig(2, 4, 16), SpecConfig(3, 4, 16)):
        llm.worker.spec = spec
        got = [o.token_ids for o in llm.generate(PROMPTS[:batch], PARAMS)]
        assert got == expected, spec
    assert llm.runner.graphs.tree_replays > 0 and llm.used_pages == 0


@pytest.mark.parametrize("steps", [0, 4])
def test_one_request_prefills_from_token_bucket_graphs_are_lossless(cuda_backend, pair, steps):
    """Prompts of 1-30 tokens prefill one at a time from CUDA graphs padded to a token
    bucket (the target's, and the draft's extend over the prompt), longer ones before
    shorter ones in a bucket, and decode eager plain decoding's tokens."""
    target, head = pair
    prompts = [PROMPTS[2], PROMPTS[4], PROMPTS[0], PROMPTS[3]]  # 30, 14, 5, 1 tokens
    plain = SpecConfig(num_steps=0)
    expected = [generate(cuda_backend, target, None, plain, [p], graphs=False)[0][0]
                for p in prompts]
    spec = SpecConfig(num_steps=steps, topk=1) if steps else plain
    llm = LLM.from_models(cuda_backend, target, head if steps else None, spec=spec, seed=0,
                          max_batch_size=1)
    assert llm.runner.enable_graphs()
    got = [o.token_ids for p in prompts for o in llm.generate([p], PARAMS)]
    assert got == expected
    assert llm.runner.graphs.prefill_replays >= len(prompts) * (2 if steps else 1)
    assert llm.used_pages == 0


def test_padded_draft_extends_after_a_prefix_equal_eager(cuda_backend):
    """The draft's extends as a catch-up runs them (one request, a prefix, varying
    lengths) from CUDA graphs padded to a token bucket, through a random head whose output
    depends on attention: 7 tokens after 20, then 3 after 27 in the same bucket, give the
    eager forward's hidden states and K/V at their own slots."""
    from eagle_hal.testing.models import tiny_eagle1, tiny_target

    device = cuda_backend.torch_device
    target = tiny_target(seed=11, vocab=61, device=device)
    head = tiny_eagle1(target, seed=12).to(device)
    llm = LLM.from_models(cuda_backend, target, head, spec=SpecConfig(num_steps=3, topk=1),
                          seed=0, max_context=64)
    assert llm.runner.enable_graphs((1,))
    runner, graphs = llm.runner, llm.runner.graphs
    request = llm.engine.add_request([(5 * i + 2) % 61 for i in range(20)],
                                     SamplingParams(max_new_tokens=32))
    llm.engine.step()  # the prompt's prefill
    generator = torch.Generator().manual_seed(7)
    for prefix, count in ((20, 7), (27, 3)):
        _draft_extend_equals_eager(runner, graphs, [request.table_row], [prefix], [count],
                                   generator)


@pytest.mark.parametrize("steps", [0, 4])
def test_ragged_prefills_of_several_prompts_are_lossless(cuda_backend, pair, steps):
    """Several prompts prefill at once from one CUDA graph per token bucket (the target's,
    and the draft's extend over the prompts): 30 + 14 + 5 tokens, then, while they run,
    30 + 14 in the same bucket of 64 (fewer requests and tokens: a stale request and token
    run left in the static batch), and decode eager plain decoding's tokens."""
    target, head = pair
    first, second = [PROMPTS[2], PROMPTS[4], PROMPTS[0]], [PROMPTS[2], PROMPTS[4]]
    plain = SpecConfig(num_steps=0)
    expected = [generate(cuda_backend, target, None, plain, [p], graphs=False)[0][0]
                for p in first + second]
    spec = SpecConfig(num_steps=steps, topk=1) if steps else plain
    llm = LLM.from_models(cuda_backend, target, head if steps else None, spec=spec, seed=0,
                          max_batch_size=8)
    assert llm.runner.enable_graphs()
    assert llm.runner.target_attn.ragged_extend_graphs
    engine = llm.engine
    requests = [engine.add_request(p, PARAMS) for p in first]
    engine.step()
    requests += [engine.add_request(p, PARAMS) for p in second]
    engine.step()
    engine.run()
    assert [engine.output(r, None).token_ids for r in requests] == expected
    assert llm.runner.graphs.prefill_replays >= 2 * (2 if steps else 1)
    assert llm.used_pages == 0


def test_ragged_draft_extends_after_prefixes_equal_eager(cuda_backend):
    """The draft's extends as a catch-up runs them (two requests with prefixes, then one;
    lengths that vary) from one CUDA graph per token bucket, through a random head whose
    output depends on attention, give the eager forward's hidden states and K/V at their
    own slots, the last one past where a one-request padding would end its row."""
    from eagle_hal.testing.models import tiny_eagle1, tiny_target

    device = cuda_backend.torch_device
    target = tiny_target(seed=11, vocab=61, device=device)
    head = tiny_eagle1(target, seed=12).to(device)
    llm = LLM.from_models(cuda_backend, target, head, spec=SpecConfig(num_steps=3, topk=1),
                          seed=0, max_context=64, max_batch_size=2)
    assert llm.runner.enable_graphs((1, 2))
    runner, graphs = llm.runner, llm.runner.graphs
    params = SamplingParams(max_new_tokens=32)
    first = llm.engine.add_request([(5 * i + 2) % 61 for i in range(20)], params)
    second = llm.engine.add_request([(3 * i + 1) % 61 for i in range(9)], params)
    llm.engine.step()  # the prompts' prefill
    rows = [first.table_row, second.table_row]
    width = runner.draft_attn.config.req_to_token.shape[1]
    generator = torch.Generator().manual_seed(7)
    for prefixes, counts in (((20, 9), (7, 5)), ((27, 14), (3, 2)), ((width - 5,), (4,))):
        _draft_extend_equals_eager(runner, graphs, rows[: len(prefixes)], prefixes, counts,
                                   generator)


def _draft_extend_equals_eager(runner, graphs, rows, prefixes, counts, generator):
    """One DRAFT_EXTEND of random tokens and features, ``counts[b]`` after ``prefixes[b]``
    in table row ``rows[b]``, run eagerly and then replayed from a token bucket's CUDA
    graph as a prefill-type extend: the same hidden states and K/V at the batch's slots."""
    from eagle_hal.hal.attention import ForwardMode

    store, device = runner.draft_kv, runner.device

    def by_slot(buffer):
        return buffer if store.layout.order == "NHD" else buffer.transpose(0, 1)

    for row, prefix, count in zip(rows, prefixes, counts, strict=False):
        runner.table.reserve(row, prefix + count)
    runner.sync_table()
    total = sum(counts)
    ids = torch.randint(61, (total,), generator=generator).tolist()
    features = torch.randn(total, runner.draft.config.hidden_size, generator=generator)
    batch = runner.causal_batch(ForwardMode.DRAFT_EXTEND, ids, list(rows), list(prefixes),
                                list(counts))
    own = torch.tensor([s for row, prefix, count in zip(rows, prefixes, counts, strict=False)
                        for s in runner.table.slots(row, prefix, prefix + count)], device=device)
    features = features.to(device)
    runner.graphs = None
    eager = runner.run_draft(batch, features, prefill=True)
    eager_kv = [by_slot(store.k_buffer(layer))[own].clone() for layer in range(store.num_layers)]
    runner.graphs = graphs
    replays = graphs.prefill_replays
    got = runner.run_draft(batch, features, prefill=True)
    assert graphs.prefill_replays == replays + 1
    torch.testing.assert_close(got, eager, atol=1e-4, rtol=1e-4)
    for layer in range(store.num_layers):
        torch.testing.assert_close(by_slot(store.k_buffer(layer))[own], eager_kv[layer],
                                   atol=1e-4, rtol=1e-4)
