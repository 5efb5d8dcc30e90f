"""Area 6, graphs: capture and replay equal eager, for draft decode, verify and draft extend,
across batch buckets with padding, at the backend's own page size. Skipped (with the reason)
on backends that declare no graph capture.

``test_replay_equals_eager`` checks the attention hooks alone, in one unpadded batch shape.
It drives them as ``engine.graphs.runner.GraphRunner`` does (the contract is in
``eagle_hal.hal.attention`` and ``eagle_hal.hal.graphs``): ``init_graph_state``,
``plan_for_capture`` on a static batch, a warm-up forward under ``warmup()``, one forward
recorded with ``record(graph, ...)``. Then for two other batches of the same shape (other
rows, slots, K/V, and prefixes longer than at capture) the request table, the KV store and
every tensor of the static batch are overwritten in place, ``plan_for_replay`` gets the
static batch with the new batch's host lengths, and the graph replays with the host
updates ``replay_host_updates`` returns for that batch (NPU graphs: sequence lengths). The
static output must equal an eager ``plan`` + ``forward`` of the new batch on a twin KV
store (the attention area's tolerances). A replay that reads stale buffers or capture-time host
values fails here.

``test_bucketed_forwards_equal_eager`` runs the core's own ``GraphRunner`` over a tiny random
Llama target and EAGLE-1 head (``conformance.runner_scene``) with buckets 1 and 4 and
batches of 1, 4, 2, 3 and 5 requests: filling a bucket, padded (2 and 3 in the graph a
full batch of 4 used before) and beyond the largest bucket (eager). Target verify, each
draft-decode depth and draft extend must give the eager forward's outputs (attention
tolerances), leave the K/V of every slot but the batch's own and the padding page
bit-identical, and release every page. ``test_chain_loop_equals_eager`` runs the draft's
whole chain loop (``speculative.drafting.draft_chain``, S = 3) through the same scene and batches,
where it replays as one graph of two DRAFT_DECODE forwards with their own metadata: the
verify tree (chain tokens, positions, layout) must equal the step-by-step loop with graphs
off exactly, the K/V at the draft's scratch slots within the attention tolerances (they
are scrambled before the replay, so a step that writes nothing fails), every other slot
but the padding page bit-identical; skipped for attention backends without
``multi_forward_graphs`` and for full tree masks. ``test_tree_loop_equals_eager`` does the
same for the tree loop (``speculative.drafting.draft_tree``, K = 2, S = 3, N = 5) as one graph,
whose levels' ancestor slots are computed inside the graph; skipped also for backends
without ``draft_slots_read_in_forward``. ``test_graph_decoding_equals_plain``
decodes greedily with graphs on (batches shrink through the buckets as requests finish)
and must equal plain decoding without graphs. ``test_prefills_padded_to_a_token_bucket_equal_plain``
prefills prompts one at a time (each joining while the earlier ones run) from graphs padded
to a token bucket and must decode as plain decoding without graphs.
``test_ragged_prefills_equal_plain`` (attention backends with ``ragged_extend_graphs``)
prefills several prompts at once, twice in one token bucket's graph (the second time fewer
requests and tokens, while the first ones still run), and must decode as plain decoding.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

import pytest
import torch

from eagle_hal.backend import Backend
from eagle_hal.conformance.checks.check_attention import build_case
from eagle_hal.conformance.compare import assert_close
from eagle_hal.conformance.paged import PagedScene, preferred_page_size
from eagle_hal.conformance.requirements import requires
from eagle_hal.conformance.runner_scene import BUCKETS, RunnerScene
from eagle_hal.engine.request import SamplingParams
from eagle_hal.hal.attention import ForwardBatch, ForwardMode
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.drafting import draft_chain

pytestmark = requires("graph_capture")
MODES = [ForwardMode.DRAFT_DECODE, ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND]
LAYER = 1
REPLAY_PREFIX_EXTRA = (3, 21)  # replayed prefixes are longer than the captured ones
STATIC_FIELDS = ("input_ids", "positions", "table_rows", "prefix_lens", "extend_lens",
                 "out_cache_loc", "tree_mask", "draft_kv_slots")


def _scene(backend: Backend, mode: ForwardMode, seed: int,
           prefix_extra: int = 0) -> tuple[PagedScene, ForwardBatch]:
    scene = PagedScene(backend, preferred_page_size(backend), "float32", seed=seed)
    batch, _ = build_case(scene, mode, scene.attention().tree_mask_mode, prefix_extra)
    return scene, batch


def _refresh(static: ForwardBatch, batch: ForwardBatch) -> ForwardBatch:
    """Copy ``batch``'s tensors into ``static``'s in place; returns the batch the replay
    hook gets: ``static``'s tensors with ``batch``'s host lengths."""
    for name in STATIC_FIELDS:
        target, source = getattr(static, name), getattr(batch, name)
        assert (target is None) == (source is None), f"{name}: replayed batch differs in kind"
        if target is not None:
            target.copy_(source.reshape(target.shape))
    return dataclasses.replace(static, prefix_lens_cpu=batch.prefix_lens_cpu,
                               extend_lens_cpu=batch.extend_lens_cpu)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_replay_equals_eager(backend: Backend, tolerance: Any, mode: ForwardMode) -> None:
    """Two different batches replayed through one captured graph equal eager forwards."""
    capture = backend.graph_capture()
    assert capture is not None
    seed = zlib.crc32(mode.value.encode())
    scene, static = _scene(backend, mode, seed)
    attention = scene.attention()
    g = scene.geometry
    tokens = static.num_tokens
    attention.init_graph_state(max_batch_size=static.batch_size, max_tokens=tokens)
    q = torch.zeros(tokens, g.num_heads, g.head_dim, device=scene.device)  # [T, H, D]
    k = torch.zeros(tokens, g.num_kv_heads, g.head_dim, device=scene.device)  # [T, H_kv, D]
    v = torch.zeros_like(k)
    metadata = attention.plan_for_capture(static)
    static.attn_metadata = metadata
    with capture.warmup():
        attention.forward(LAYER, q, k, v, static)
    graph = capture.new_graph()
    out = capture.record(graph, lambda: attention.forward(LAYER, q, k, v, static))
    for replay, extra in enumerate(REPLAY_PREFIX_EXTRA):
        twin, batch = _scene(backend, mode, seed + 1 + replay, extra)
        # What the engine owns is updated in place: the request table, the KV store.
        scene.req_to_token.copy_(twin.req_to_token)
        for layer in range(g.num_layers):
            scene.store.k_buffer(layer).copy_(twin.store.k_buffer(layer))
            scene.store.v_buffer(layer).copy_(twin.store.v_buffer(layer))
        new_q = torch.randn(tokens, g.num_heads, g.head_dim, generator=twin.gen).to(scene.device)
        new_k, new_v = (t.to(scene.device) for t in twin.random_kv(tokens))
        q.copy_(new_q)
        k.copy_(new_k)
        v.copy_(new_v)
        view = _refresh(static, batch)
        attention.plan_for_replay(view, metadata)
        graph.replay(attention.replay_host_updates(view, metadata))
        backend.synchronize()
        eager_attention = twin.attention()
        batch.attn_metadata = eager_attention.plan(batch)
        expected = eager_attention.forward(LAYER, new_q, new_k, new_v, batch)
        assert_close(f"graph replay {replay} of {mode.value}: output vs eager", out, expected,
                     *tolerance("float32"))


BATCH_SIZES = (1, 4, 2, 3, 5)  # 1 and 4 fill buckets; 2 and 3 padded to 4; 5 runs eagerly
PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], list(range(20, 44)), [5, 3, 5, 8, 9, 7, 9]]
MAX_NEW_TOKENS = [9, 6, 3, 7]  # the batch shrinks through the buckets as requests finish


def _graph_use(scene: RunnerScene, size: int) -> str:
    bucket = scene.runner.graphs.bucket_for(size) if scene.runner.graphs else None
    if bucket is None:
        return f"batch of {size} beyond the largest bucket {BUCKETS[-1]} (eager)"
    return f"batch of {size} in bucket {bucket}" + (" (padded)" if bucket > size else "")


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_bucketed_forwards_equal_eager(backend: Backend, tolerance: Any, mode: ForwardMode) -> None:
    """The core's GraphRunner on the backend: full, padded and too-large batches equal eager;
    padded rows disturb no real K/V; no page leaks."""
    scene = RunnerScene(backend, seed=zlib.crc32(b"buckets" + mode.value.encode()) % 1000)
    assert scene.graphs_on, (
        f"backend {backend.name!r} offers graph capture but its attention backend does not "
        "implement plan_for_replay, so the engine runs every forward eagerly"
    )
    graphs, atol_rtol = scene.runner.graphs, tolerance("float32")
    assert graphs is not None
    for size in BATCH_SIZES:
        rows, seq_lens = scene.add_requests(size)
        for batch, features in scene.batches(mode, rows, seq_lens):
            slots = batch.draft_kv_slots
            depth = f" depth {slots.shape[1]}" if slots is not None else ""
            what = f"{mode.value}{depth}, {_graph_use(scene, size)}"
            expected = scene.run_eagerly(batch, features)
            eager_kv, replays = scene.kv_by_slot(), graphs.replays
            got = scene.run(batch, features)
            served = graphs.replays - replays
            assert served == int(graphs.bucket_for(size) is not None), (
                f"{what}: {served} forwards served by a graph (graph runner bucketing)"
            )
            graph_kv = scene.kv_by_slot()
            scene.assert_kv_kept(what, eager_kv, graph_kv, batch.out_cache_loc)
            own = batch.out_cache_loc.long().cpu()
            assert_close(f"{what}: K/V written at out_cache_loc vs eager", graph_kv[own],
                         eager_kv[own], *atol_rtol)
            for index, (out, reference) in enumerate(zip(got, expected, strict=True)):
                name = "hidden states [T, H]" if index == 0 else f"aux hidden states {index}"
                assert_close(f"{what}: {name} vs eager", out, reference, *atol_rtol)
        scene.release(rows)
    table = scene.runner.table
    assert table.allocator.num_used_pages == 0 and not table.leaked_pages(), (
        f"{mode.value}: {table.allocator.num_used_pages} pages still held after every request "
        f"was released; leaked: {sorted(table.leaked_pages())}"
    )


CHAIN_STEPS = 3  # two DRAFT_DECODE forwards in one graph


def test_chain_loop_equals_eager(backend: Backend, tolerance: Any) -> None:
    """The chain draft's loop as one graph equals the step-by-step loop with graphs off:
    full, padded and too-large batches; padded rows disturb no real K/V."""
    scene = RunnerScene(backend, seed=zlib.crc32(b"chain") % 1000)
    runner, graphs = scene.runner, scene.runner.graphs
    assert scene.graphs_on and graphs is not None
    graphs.chain_graphs = True  # the engine's default (GraphRunner(chain_graphs=True))
    assert runner.draft_attn is not None
    if not runner.draft_attn.multi_forward_graphs:
        pytest.skip(f"{type(runner.draft_attn).__name__} does not declare multi_forward_graphs: "
                    "the chain draft replays one graph per step")
    if runner.tree_mask_mode == TreeMaskMode.FULL:
        pytest.skip("full tree masks are sized by the prefix lengths: the chain draft replays "
                    "one graph per step")
    ops = backend.sampling_ops()
    for size in BATCH_SIZES:
        rows, seq_lens = scene.add_requests(size)
        inputs = scene.chain_inputs(rows, seq_lens)
        own = inputs.scratch[:, : CHAIN_STEPS - 1]  # [B, S - 1] the draft's K/V slots
        what = f"chain draft S={CHAIN_STEPS}, {_graph_use(scene, size)}"
        _assert_loop_graph_equals_eager(
            scene, "chain", what, size, own,
            lambda inputs=inputs: draft_chain(runner, ops, CHAIN_STEPS, inputs), tolerance,
        )
    assert graphs.chain_replays > 0


def _assert_loop_graph_equals_eager(
    scene: RunnerScene, kind: str, what: str, size: int, own: torch.Tensor,
    draft: Any, tolerance: Any,
) -> None:
    """``draft()`` (a chain or tree draft loop) with graphs off, then through the graph
    runner over draft K/V scrambled at ``own`` (the loop's scratch slots): one replay of a
    ``kind`` loop graph when a bucket holds the batch, the same verify tree exactly, the
    same K/V at ``own`` within float32 tolerance, every other slot but the padding page's
    kept."""
    runner, graphs = scene.runner, scene.runner.graphs
    counter = f"{kind}_replays"
    with torch.inference_mode():
        runner.graphs = None
        try:
            expected = draft()
        finally:
            runner.graphs = graphs
        eager_kv = scene.kv_by_slot()
        scene.scramble_draft_kv(own)
        replays = getattr(graphs, counter)
        got = draft()
    served = getattr(graphs, counter) - replays
    assert served == int(graphs.bucket_for(size) is not None), (
        f"{what}: {served} {kind} loops served by a graph (graph runner bucketing)"
    )
    for name, value, reference in zip(got._fields, got, expected, strict=True):
        if isinstance(value, torch.Tensor):
            assert torch.equal(value.cpu(), reference.cpu()), (
                f"{what}: verify tree {name} differs from the eager loop: "
                f"{value.tolist()} vs {reference.tolist()}"
            )
        else:
            assert value == reference, f"{what}: {name} {value!r} vs {reference!r}"
    graph_kv = scene.kv_by_slot()
    scene.assert_kv_kept(what, eager_kv, graph_kv, own.reshape(-1))
    own_slots = own.reshape(-1).long().cpu()
    assert_close(f"{what}: draft K/V at the scratch slots vs eager", graph_kv[own_slots],
                 eager_kv[own_slots], *tolerance("float32"))


def test_tree_loop_equals_eager(backend: Backend, tolerance: Any) -> None:
    """The tree draft's loop as one graph equals the level-by-level loop with graphs off:
    full, padded and too-large batches; padded rows disturb no real K/V."""
    from eagle_hal.conformance.runner_scene import BRANCHES, DRAFT_STEPS
    from eagle_hal.hal.sampling import TreeShape
    from eagle_hal.speculative.drafting import draft_tree

    scene = RunnerScene(backend, seed=zlib.crc32(b"tree") % 1000)
    runner, graphs = scene.runner, scene.runner.graphs
    assert scene.graphs_on and graphs is not None
    graphs.tree_graphs = True  # the engine's default (GraphRunner(tree_graphs=True))
    attn = runner.draft_attn
    assert attn is not None
    if not (attn.multi_forward_graphs and attn.draft_slots_read_in_forward):
        pytest.skip(f"{type(attn).__name__} does not declare multi_forward_graphs and "
                    "draft_slots_read_in_forward: the tree draft replays one graph per level")
    if runner.tree_mask_mode == TreeMaskMode.FULL:
        pytest.skip("full tree masks are sized by the prefix lengths: the tree draft replays "
                    "one graph per level")
    ops = backend.sampling_ops()
    shape = TreeShape(DRAFT_STEPS, BRANCHES, 5)
    for size in BATCH_SIZES:
        rows, seq_lens = scene.add_requests(size)
        inputs = scene.tree_inputs(rows, seq_lens)
        own = inputs.scratch[:, : (DRAFT_STEPS - 1) * BRANCHES]  # the draft's K/V slots
        what = f"tree draft K={BRANCHES} S={DRAFT_STEPS} N=5, {_graph_use(scene, size)}"
        _assert_loop_graph_equals_eager(
            scene, "tree", what, size, own,
            lambda inputs=inputs: draft_tree(runner, ops, shape, inputs), tolerance,
        )
    assert graphs.tree_replays > 0


@pytest.mark.parametrize("spec", [
    pytest.param(SpecConfig(num_steps=3, topk=1, num_draft_tokens=4), id="chain-S3"),
    pytest.param(SpecConfig(num_steps=2, topk=2, num_draft_tokens=4), id="tree-K2-S2-N4"),
])
def test_graph_decoding_equals_plain(backend: Backend, spec: SpecConfig) -> None:
    """Greedy speculative decoding with graphs on equals plain decoding without graphs."""
    from eagle_hal.api import LLM
    from eagle_hal.testing.models import tiny_eagle1, tiny_target

    device, page_size = backend.torch_device, preferred_page_size(backend)
    target = tiny_target(seed=21, device=device)
    head = tiny_eagle1(target, seed=22).to(device)
    params = [SamplingParams(max_tokens=n) for n in MAX_NEW_TOKENS]
    plain = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0),
                            page_size=page_size)
    expected = plain.generate(PROMPTS, params)
    llm = LLM.from_models(backend, target, head, spec=spec, page_size=page_size)
    assert llm.runner.enable_graphs(BUCKETS), "graph capture offered but the engine cannot replay"
    outputs = llm.generate(PROMPTS, params)
    for i, (got, reference) in enumerate(zip(outputs, expected, strict=True)):
        assert got.error is None, f"request {i} failed: {got.error}"
        assert got.token_ids == reference.token_ids, (
            f"greedy decoding with graphs (S={spec.num_steps}, K={spec.topk}, "
            f"N={spec.num_draft_tokens}): prompt {i} differs from plain decoding: "
            f"{list(got.token_ids)} vs {list(reference.token_ids)}"
        )
    graphs = llm.runner.graphs
    assert graphs is not None and graphs.total_replays > 0, "nothing replayed a graph"
    assert llm.used_pages == 0 and llm.leaked_pages == 0, (
        f"{llm.used_pages} KV pages still held after the batch finished"
    )


def test_prefills_padded_to_a_token_bucket_equal_plain(backend: Backend) -> None:
    """One-request prefills replayed from graphs padded to a token bucket (the target's and
    the draft's extend over the prompt) decode greedily as plain decoding without graphs,
    with a longer prompt's request still running when a shorter one reuses its bucket
    (the padding must not write that request's K/V)."""
    llm = _prefill_groups_decode_as_plain(
        backend, lambda vocab: [[[(7 * i + 3) % vocab for i in range(30)]],
                                [[(5 * i + 1) % vocab for i in range(20)]],
                                [[(3 * i + 2) % vocab for i in range(5)]]],
    )
    graphs = llm.runner.graphs
    assert graphs is not None and graphs.prefill_replays >= 2 * 3, (
        f"{graphs.prefill_replays if graphs else 0} prefills replayed from token bucket graphs"
    )


def test_ragged_prefills_equal_plain(backend: Backend) -> None:
    """Several prompts prefilled at once replay from one token bucket graph per model
    (``ragged_extend_graphs``): 30 + 20 + 5 tokens, then, while those run, 24 + 17 in the
    same bucket of 64 (a stale request and token run left in the static batch), and decode
    greedily as plain decoding without graphs."""
    llm = _prefill_groups_decode_as_plain(
        backend, lambda vocab: [[[(7 * i + 3) % vocab for i in range(30)],
                                 [(5 * i + 1) % vocab for i in range(20)],
                                 [(3 * i + 2) % vocab for i in range(5)]],
                                [[(11 * i + 4) % vocab for i in range(24)],
                                 [(13 * i + 6) % vocab for i in range(17)]]],
        ragged=True,
    )
    graphs = llm.runner.graphs
    assert graphs is not None and graphs.prefill_replays >= 4, (
        f"{graphs.prefill_replays if graphs else 0} prefills replayed from token bucket graphs, "
        "expected the target's and the draft's of both prefills"
    )


def _prefill_groups_decode_as_plain(
    backend: Backend, make_groups: Any, *, ragged: bool = False
) -> Any:
    """Prefill the groups of prompts ``make_groups(vocab)`` one group a step (each joining
    while the earlier ones run) with graphs on, a tiny target and head, chain S = 3; decode
    to the end; every request's tokens must equal plain decoding's without graphs. With
    ``ragged``, skips for attention backends without ``ragged_extend_graphs``. Returns the
    engine's ``LLM`` (pages checked released)."""
    from eagle_hal.api import LLM
    from eagle_hal.testing.models import tiny_eagle1, tiny_target

    device, page_size = backend.torch_device, preferred_page_size(backend)
    target = tiny_target(seed=23, device=device)
    head = tiny_eagle1(target, seed=24).to(device)
    groups = make_groups(target.config.vocab_size)
    prompts = [prompt for group in groups for prompt in group]
    params = SamplingParams(max_tokens=8)
    plain = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0),
                            page_size=page_size)
    expected = [o.token_ids for o in plain.generate(prompts, params)]
    llm = LLM.from_models(backend, target, head, spec=SpecConfig(num_steps=3, topk=1),
                          page_size=page_size, max_batch_size=max(4, len(prompts)))
    assert llm.runner.enable_graphs(BUCKETS), "graph capture offered but the engine cannot replay"
    if ragged and not llm.runner.target_attn.ragged_extend_graphs:
        pytest.skip(f"{type(llm.runner.target_attn).__name__} does not declare "
                    "ragged_extend_graphs: several prompts at once prefill eagerly")
    engine, requests = llm.engine, []
    for group in groups:
        requests += [engine.add_request(prompt, params) for prompt in group]
        engine.step()
    engine.run()
    for i, (request, reference) in enumerate(zip(requests, expected, strict=True)):
        got = engine.output(request, None)
        assert got.error is None, f"request {i} failed: {got.error}"
        assert got.token_ids == reference, (
            f"prompt {i} ({len(prompts[i])} tokens) prefilled from a token bucket graph "
            f"decodes {list(got.token_ids)}, plain decoding {list(reference)}"
        )
    assert llm.used_pages == 0 and llm.leaked_pages == 0
    return llm
