"""The draft's loop captured as one graph, a chain's and a tree's
(``engine/graphs/draft_loop.py``), on CPU.

Oracle: for the captured chain loop, the step-by-step chain draft with graphs off
(``speculative.drafting.draft_chain``) on the same requests, and for the tree loop the
level-by-level draft (``speculative.drafting.draft_tree``); for whole runs, greedy plain decoding
of the same target through the eager CPU reference backend (pure-torch attention, no
graphs). The backends under test (``graph_runner_backends``) capture with the strict
``EmulatedGraphCapture`` (``eagle_hal.testing.graphs``): a replay re-runs a snapshot of the
captured forward, so it sees the static buffers' in-place updates and nothing else, as a
device graph does. Their attention is the Triton backend (interpreted) or the pure-torch
one with its own graph hooks. Real capture is in tests/backends/cuda.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.api import LLM
from eagle_hal.conformance.runner_scene import BRANCHES, DRAFT_STEPS, RunnerScene
from eagle_hal.engine.page_allocator import PADDING_PAGE
from eagle_hal.hal.sampling import TreeShape
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.drafting import draft_chain, draft_tree
from eagle_hal.testing.models import tiny_eagle1
from graph_runner_backends import (
    PARAMS,
    PROMPTS,
    BitPackedReplayingBackend,
    OneForwardPerGraphBackend,
    ReplayingTorchBackend,
    TritonCpuBackend,
    _backend,
    plain,
)

pytest.importorskip("triton")



# -- the draft's chain loop as one graph ------------------------------------------------------

CHAIN_BATCHES = (4, 1, 3)  # in bucket 4: full, then padded over rows the full batch used


def _chain_both_ways(scene, steps, inputs):
    """The chain draft step by step with graphs off, then from the chain graph over draft
    K/V scrambled at the scratch slots; both trees and the K/V after each."""
    runner, graphs = scene.runner, scene.runner.graphs
    ops = runner.backend.sampling_ops()
    with torch.inference_mode():
        runner.graphs = None
        try:
            eager = draft_chain(runner, ops, steps, inputs)
        finally:
            runner.graphs = graphs
        eager_kv = scene.kv_by_slot()
        scene.scramble_draft_kv(inputs.scratch[:, : steps - 1])
        replays = graphs.chain_replays
        captured = draft_chain(runner, ops, steps, inputs)
        assert graphs.chain_replays == replays + 1, "the chain loop did not replay a graph"
    return eager, eager_kv, captured, scene.kv_by_slot()


@pytest.mark.parametrize("kind,page_size,steps", [
    (ReplayingTorchBackend, 1, 2),
    (ReplayingTorchBackend, 1, 5),
    (ReplayingTorchBackend, 16, 3),
    (BitPackedReplayingBackend, 16, 4),
    (TritonCpuBackend, 1, 3),
    (TritonCpuBackend, 16, 4),
], ids=["reference-page1-S2", "reference-page1-S5", "reference-page16-S3",
        "reference-bitpacked-page16-S4", "triton-page1-S3", "triton-page16-S4"])
def test_chain_loop_graph_equals_eager_loop(kind, page_size, steps):
    """Batches of 4, 1 and 3 in bucket 4 (earlier requests kept alive): the chain graph's
    verify tree equals the eager loop's exactly, its draft K/V at the scratch slots to
    float32 rounding, and it changes no other slot but the padding page's (padded rows
    write nowhere else, though rows of the earlier full batch are live)."""
    scene = RunnerScene(_backend(kind), seed=7 * steps + page_size, page_size=page_size,
                        buckets=(4,))
    for size in CHAIN_BATCHES:
        rows, seq_lens = scene.add_requests(size)
        inputs = scene.chain_inputs(rows, seq_lens)
        eager, eager_kv, captured, graph_kv = _chain_both_ways(scene, steps, inputs)
        assert captured.mask_mode == eager.mask_mode
        for name, got, expected in zip(eager._fields[:-1], captured[:-1], eager[:-1], strict=False):
            assert torch.equal(got, expected), f"batch {size}: {name} {got} vs {expected}"
        own = inputs.scratch[:, : steps - 1].reshape(-1)
        changed = (eager_kv != graph_kv).any(dim=1)
        changed[own] = False
        changed[PADDING_PAGE * page_size : (PADDING_PAGE + 1) * page_size] = False
        assert not changed.any(), f"batch {size}: slots {changed.nonzero()[:, 0].tolist()} changed"
        # float32 rounding (padded GEMMs, wider captured key sets) grows along the chain
        # with the activations' scale, so it is bounded relative to that scale
        error = (graph_kv[own] - eager_kv[own]).abs().max()
        assert error <= 1e-4 * eager_kv[own].abs().max(), f"batch {size}: K/V error {error}"
    assert scene.runner.graphs.num_graphs == 1  # one chain graph served every batch


def test_chain_loop_declines_what_it_cannot_capture():
    """No chain graph beyond the largest bucket, for S < 2, for FULL tree masks, or for an
    attention backend without multi_forward_graphs: the per-step path runs."""
    scene = RunnerScene(_backend(ReplayingTorchBackend), seed=3, page_size=1, buckets=(1, 2))
    graphs = scene.runner.graphs

    ops = scene.runner.backend.sampling_ops()

    def chain(size, steps=3, scene=scene):
        rows, seq_lens = scene.add_requests(size)
        inputs = scene.chain_inputs(rows, seq_lens)
        replays = scene.runner.graphs.chain_replays
        with torch.inference_mode():
            draft_chain(scene.runner, ops, steps, inputs)
        replayed = scene.runner.graphs.chain_replays - replays
        assert replayed == int(scene.runner.graphs.can_replay_draft_loop(
            TreeShape(steps, 1, steps + 1), inputs))
        return replayed

    assert chain(3) == 0 and chain(1, steps=1) == 0
    assert chain(2) == 1
    scene.runner.target_attn.tree_mask_mode = TreeMaskMode.FULL
    assert chain(2) == 0
    single = RunnerScene(_backend(OneForwardPerGraphBackend), seed=3, page_size=1, buckets=(1, 2))
    assert single.graphs_on
    assert chain(1, scene=single) == 0
    assert graphs.chain_replays == 1 and single.runner.graphs.chain_replays == 0


@pytest.mark.parametrize("head_kind,steps", [("matching", 4), ("random", 3)])
def test_chain_decoding_with_the_chain_graph_is_lossless(backends, pair, head_kind, steps):
    """Greedy chain decoding whose draft loop replays one graph (batches of 3 and 1 padded
    into bucket 4) equals plain decoding; every page is released."""
    target, head = pair
    if head_kind == "random":
        head = tiny_eagle1(target, seed=11)
    expected = plain(backends[0], target, PROMPTS)
    spec = SpecConfig(num_steps=steps, topk=1, num_draft_tokens=steps + 1)
    llm = LLM.from_models(backends[2], target, head, spec=spec, seed=0)
    llm.runner.enable_graphs((4,))
    got = [o.token_ids for o in llm.generate(PROMPTS, PARAMS)]
    got_one = [o.token_ids for o in llm.generate(PROMPTS[1:2], PARAMS)]
    assert got == expected and got_one == expected[1:2]
    assert llm.runner.graphs.chain_replays > 0 and llm.used_pages == 0


def test_chain_loop_graph_can_be_turned_off(backends, pair):
    """With ``chain_graphs=False`` a chain's draft steps replay one graph each."""
    target, head = pair
    spec = SpecConfig(num_steps=3, topk=1, num_draft_tokens=4)
    llm = LLM.from_models(backends[2], target, head, spec=spec, seed=0)
    llm.runner.enable_graphs((4,), chain_graphs=False)
    got = [o.token_ids for o in llm.generate(PROMPTS, PARAMS)]
    assert got == plain(backends[0], target, PROMPTS)
    assert llm.runner.graphs.chain_replays == 0 and llm.runner.graphs.replays > 0


# -- the draft's tree loop as one graph -------------------------------------------------------

TREE_SHAPE = TreeShape(DRAFT_STEPS, BRANCHES, 5)


def _tree_both_ways(scene, inputs):
    """The tree draft level by level with graphs off, then from the tree graph over draft
    K/V scrambled at the levels' scratch slots; both verify trees and the K/V after each."""
    runner, graphs = scene.runner, scene.runner.graphs
    ops = runner.backend.sampling_ops()
    written = inputs.scratch[:, : (DRAFT_STEPS - 1) * BRANCHES]
    with torch.inference_mode():
        runner.graphs = None
        try:
            eager = draft_tree(runner, ops, TREE_SHAPE, inputs)
        finally:
            runner.graphs = graphs
        eager_kv = scene.kv_by_slot()
        scene.scramble_draft_kv(written)
        replays = graphs.tree_replays
        captured = draft_tree(runner, ops, TREE_SHAPE, inputs)
        assert graphs.tree_replays == replays + 1, "the tree loop did not replay a graph"
    return eager, eager_kv, captured, scene.kv_by_slot(), written


@pytest.mark.parametrize("kind,page_size", [
    (ReplayingTorchBackend, 1),
    (ReplayingTorchBackend, 16),
    (BitPackedReplayingBackend, 16),
    (TritonCpuBackend, 1),
], ids=["reference-page1", "reference-page16", "reference-bitpacked-page16", "triton-page1"])
def test_tree_loop_graph_equals_eager_loop(kind, page_size):
    """Batches of 4, 1 and 3 in bucket 4 (earlier requests kept alive): the tree graph's
    verify tree equals the level-by-level loop's exactly, its draft K/V at the scratch
    slots to float32 rounding, and it changes no other slot but the padding page's."""
    scene = RunnerScene(_backend(kind), seed=11 + page_size, page_size=page_size, buckets=(4,))
    for size in CHAIN_BATCHES:
        rows, seq_lens = scene.add_requests(size)
        inputs = scene.tree_inputs(rows, seq_lens)
        eager, eager_kv, captured, graph_kv, written = _tree_both_ways(scene, inputs)
        assert captured.mask_mode == eager.mask_mode
        for name, got, expected in zip(eager._fields[:-1], captured[:-1], eager[:-1], strict=False):
            assert torch.equal(got, expected), f"batch {size}: {name} {got} vs {expected}"
        own = written.reshape(-1)
        changed = (eager_kv != graph_kv).any(dim=1)
        changed[own] = False
        changed[PADDING_PAGE * page_size : (PADDING_PAGE + 1) * page_size] = False
        assert not changed.any(), f"batch {size}: slots {changed.nonzero()[:, 0].tolist()} changed"
        error = (graph_kv[own] - eager_kv[own]).abs().max()
        assert error <= 1e-4 * eager_kv[own].abs().max(), f"batch {size}: K/V error {error}"
    assert scene.runner.graphs.num_graphs == 1  # one tree graph served every batch


def test_tree_loop_declines_what_it_cannot_capture():
    """No tree graph beyond the largest bucket, for S < 2, for FULL tree masks, or for an
    attention backend without multi_forward_graphs: the level-by-level path runs."""
    scene = RunnerScene(_backend(ReplayingTorchBackend), seed=3, page_size=1, buckets=(1, 2))
    graphs = scene.runner.graphs
    ops = scene.runner.backend.sampling_ops()

    def tree(size, shape=TREE_SHAPE, scene=scene):
        rows, seq_lens = scene.add_requests(size)
        inputs = scene.tree_inputs(rows, seq_lens)
        replays = scene.runner.graphs.tree_replays
        with torch.inference_mode():
            draft_tree(scene.runner, ops, shape, inputs)
        replayed = scene.runner.graphs.tree_replays - replays
        assert replayed == int(scene.runner.graphs.can_replay_draft_loop(shape, inputs))
        return replayed

    assert tree(3) == 0 and tree(1, TreeShape(1, BRANCHES, 3)) == 0
    assert tree(2) == 1
    scene.runner.target_attn.tree_mask_mode = TreeMaskMode.FULL
    assert tree(2) == 0
    single = RunnerScene(_backend(OneForwardPerGraphBackend), seed=3, page_size=1, buckets=(1, 2))
    assert tree(1, scene=single) == 0
    assert graphs.tree_replays == 1 and single.runner.graphs.tree_replays == 0


@pytest.mark.parametrize("head_kind", ["matching", "random"])
def test_tree_decoding_with_the_tree_graph_is_lossless(backends, pair, head_kind):
    """Greedy tree decoding whose draft loop replays one graph (batches of 3 and 1 padded
    into bucket 4) equals plain decoding; every page is released."""
    target, head = pair
    if head_kind == "random":
        head = tiny_eagle1(target, seed=11)
    expected = plain(backends[0], target, PROMPTS)
    llm = LLM.from_models(backends[2], target, head, spec=SpecConfig(3, 2, 6), seed=0)
    llm.runner.enable_graphs((4,))
    got = [o.token_ids for o in llm.generate(PROMPTS, PARAMS)]
    got_one = [o.token_ids for o in llm.generate(PROMPTS[1:2], PARAMS)]
    assert got == expected and got_one == expected[1:2]
    assert llm.runner.graphs.tree_replays > 0 and llm.used_pages == 0


def test_tree_loop_graph_can_be_turned_off(backends, pair):
    """With ``tree_graphs=False`` a tree's draft levels replay one graph each."""
    target, head = pair
    llm = LLM.from_models(backends[2], target, head, spec=SpecConfig(3, 2, 6), seed=0)
    llm.runner.enable_graphs((4,), tree_graphs=False)
    got = [o.token_ids for o in llm.generate(PROMPTS, PARAMS)]
    assert got == plain(backends[0], target, PROMPTS)
    graphs = llm.runner.graphs
    assert graphs.tree_replays == 0 and "draft_decode" in {k[1].value for k in graphs._graphs}


def test_a_tree_graph_captured_after_the_verify_graph_keeps_its_tree(backends, pair):
    """Depths that share a verify shape (the adaptive mode's probes): the tree graph for
    S = 2 is captured after the verify graph that S = 3 already captured for the same N,
    so with outputs in the shared pool that verify's replays would overwrite the tree before
    the accept reads it (an H200 crashed on this; the emulated pool poisons such outputs).
    Decoding equals plain decoding at both depths."""
    target, head = pair
    expected = plain(backends[0], target, PROMPTS)
    llm = LLM.from_models(backends[2], target, head, spec=SpecConfig(3, 2, 5), seed=0)
    llm.runner.enable_graphs((4,))
    assert [o.token_ids for o in llm.generate(PROMPTS, PARAMS)] == expected
    llm.worker.spec = SpecConfig(2, 2, 5)
    assert [o.token_ids for o in llm.generate(PROMPTS, PARAMS)] == expected
    assert sum(key[1].topk > 1 for key in llm.runner.graphs._loops) == 2
    assert llm.used_pages == 0
