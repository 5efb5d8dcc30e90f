"""The draft's chain and tree loops as one device graph each, for ``engine.graph_runner``.

The draft's chain loop (``speculative.drafting.draft_chain``: top-1, S steps) is captured whole,
``engine.chain_graph.ChainGraph``: its S - 1 DRAFT_DECODE forwards, their lm_head top-1 and
the chain's verify layout in one graph per

    (bucket, S, hidden width and dtype, tree-mask layout),

each step with its own static batch and attention metadata (the contract for several
forwards in one graph is in ``eagle_hal.hal.attention``). Attention backends without
``multi_forward_graphs`` and ``FULL`` tree masks keep the per-step path. The tree loop
(K > 1) is captured the same way, ``engine.tree_graph.TreeGraph``, one graph per (bucket,
S, K, N, hidden width and dtype, tree-mask layout) unless ``GraphRunner.tree_graphs`` is
off, for attention backends that also read ``draft_kv_slots`` in their forward
(``draft_slots_read_in_forward``).

The functions take the ``GraphRunner`` that holds the captured loops, the graph pool and
the replay counters; its ``run_draft_chain`` and ``run_draft_tree`` call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from eagle_hal.backend import TreeMaskMode
from eagle_hal.engine.chain_graph import ChainGraph
from eagle_hal.engine.tree_graph import TreeGraph
from eagle_hal.hal.sampling import SamplingOps, TreeShape, VerifyTree

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.engine.graph_runner import GraphRunner

__all__ = ["run_draft_chain", "run_draft_tree"]


@torch.inference_mode()
def run_draft_chain(
    graphs: GraphRunner,
    steps: int,
    rows: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_lens_cpu: Sequence[int],
    scratch: torch.Tensor,
    first_tokens: torch.Tensor,
    hidden: torch.Tensor,
    roots: torch.Tensor,
) -> VerifyTree | None:
    """The chain draft of ``speculative.drafting.draft_chain`` and its verify tree (node 0 =
    ``roots``, then the S chain tokens) from one graph, or ``None`` (run it step by
    step). Captures on first sight of a (bucket, S).

    ``rows``/``seq_lens``/``first_tokens``/``roots`` ``[B]`` int64, ``seq_lens_cpu`` their
    host lengths, ``scratch`` ``[B, >= S - 1]`` the slots of draft positions
    ``seq_len .. seq_len + S - 2``, ``hidden`` ``[B, H]``. Writes the draft K/V of depths
    ``1 .. S - 1`` at those slots. The tree's tokens and positions are fresh copies;
    its other tensors are views of the graph's outputs, the same at every replay."""
    runner = graphs.runner
    attn, mask_mode = runner.draft_attn, runner.tree_mask_mode
    bucket = _draft_loop_bucket(graphs, len(seq_lens_cpu), steps, graphs.chain_graphs, False)
    if bucket is None or attn is None:
        return None
    key = (bucket, steps, tuple(hidden.shape[1:]), hidden.dtype, mask_mode)
    chain = graphs._chains.get(key)
    if chain is None:
        graphs._init_graph_state(attn)
        chain = ChainGraph.capture(
            graphs.capture, runner.draft, attn, bucket=bucket, steps=steps, hidden=hidden,
            mask_mode=mask_mode, pad_slot=graphs.pad_slot, slot_dtype=runner.slot_dtype,
        )
        graphs._chains[key] = chain
    tree = chain.replay(rows, seq_lens, seq_lens_cpu, scratch, first_tokens, hidden, roots)
    graphs.chain_replays += 1
    return tree


@torch.inference_mode()
def run_draft_tree(
    graphs: GraphRunner,
    ops: SamplingOps,
    shape: TreeShape,
    rows: torch.Tensor,
    seq_lens: torch.Tensor,
    seq_lens_cpu: Sequence[int],
    scratch: torch.Tensor,
    probs: torch.Tensor,
    ids: torch.Tensor,
    hidden: torch.Tensor,
    roots: torch.Tensor,
) -> VerifyTree | None:
    """The tree draft of ``speculative.drafting.draft_tree`` and its verify tree from one
    graph (``engine.tree_graph``), or ``None`` (run it level by level). Captures on
    first sight of a (bucket, S, K, N).

    ``rows``/``seq_lens``/``roots`` ``[B]`` int64, ``seq_lens_cpu`` their host lengths,
    ``scratch`` ``[B, >= S * K]`` the slots of the reserved block (depth-major, then
    branch), ``probs``/``ids`` ``[B, K]`` the extend's top-K, ``hidden`` ``[B, H]``.
    Writes the draft K/V of depths ``1 .. S - 1`` at their scratch slots."""
    runner = graphs.runner
    attn, mask_mode = runner.draft_attn, runner.tree_mask_mode
    bucket = _draft_loop_bucket(
        graphs, len(seq_lens_cpu), shape.num_steps, graphs.tree_graphs, True
    )
    if bucket is None or attn is None:
        return None
    key = (bucket, shape, tuple(hidden.shape[1:]), hidden.dtype, mask_mode)
    tree = graphs._trees.get(key)
    if tree is None:
        graphs._init_graph_state(attn)
        tree = TreeGraph.capture(
            graphs.capture, runner.draft, attn, ops, bucket=bucket, shape=shape,
            hidden=hidden, mask_mode=mask_mode, pad_slot=graphs.pad_slot,
            slot_dtype=runner.slot_dtype,
        )
        graphs._trees[key] = tree
    verify = tree.replay(rows, seq_lens, seq_lens_cpu, scratch, probs, ids, hidden, roots)
    graphs.tree_replays += 1
    return verify


def _draft_loop_bucket(
    graphs: GraphRunner, size: int, steps: int, enabled: bool, computes_draft_slots: bool
) -> int | None:
    """The bucket a draft loop of ``steps`` levels over ``size`` requests replays in as
    one graph, or ``None``: the loop kind is switched off, no bucket holds the batch,
    fewer than two levels, no draft, an attention without ``multi_forward_graphs`` (or,
    for a loop that computes its ancestor slots in the graph, without
    ``draft_slots_read_in_forward``), or ``FULL`` tree masks (sized by host lengths)."""
    runner = graphs.runner
    attn = runner.draft_attn
    if not enabled or steps < 2 or runner.draft is None or attn is None:
        return None
    if not attn.multi_forward_graphs or runner.tree_mask_mode == TreeMaskMode.FULL:
        return None
    if computes_draft_slots and not attn.draft_slots_read_in_forward:
        return None
    return graphs.bucket_for(size)
