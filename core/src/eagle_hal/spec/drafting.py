"""Growing the draft tree: S levels of top-K expansion through the draft model.

The draft's scratch KV for the draft token at depth d (1-based), branch k of a request lives
at position ``seq_len + (d - 1) * K + k`` of the request's reserved block; only depths
``1 .. S - 1`` are ever run through the draft (the last level is only scored). Each branch
attends to its request's cached prefix plus its own ancestors (``draft_kv_slots``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from eagle_hal.backend import TreeMaskMode
from eagle_hal.engine.runner import ModelRunner
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.sampling import SamplingOps, TreeShape, TreeStep, VerifyTree

__all__ = ["DraftState", "draft_chain", "draft_tree", "single_node_tree"]


class DraftState(NamedTuple):
    """What the last draft extend left for a request."""

    topk_probs: torch.Tensor  # [K] float32 draft probabilities of the root's children
    topk_ids: torch.Tensor  # [K] int64 their target-vocabulary token ids
    hidden: torch.Tensor  # [H] the draft's output hidden state at the last position


def draft_tree(
    runner: ModelRunner,
    ops: SamplingOps,
    shape: TreeShape,
    states: Sequence[DraftState],
    rows: Sequence[int],
    rows_t: torch.Tensor,
    seq_lens: Sequence[int],
    seq_t: torch.Tensor,
    roots: torch.Tensor,
) -> VerifyTree:
    """Draft S levels for every request and lay out the verify tree (root = ``roots``).
    A chain (K = 1, N = S + 1) takes ``draft_chain``, which needs no tree bookkeeping."""
    if shape.topk == 1 and shape.num_draft_tokens == shape.num_steps + 1:
        return draft_chain(runner, ops, shape.num_steps, states, rows, rows_t, seq_lens, seq_t, roots)
    draft = runner.draft
    batch, topk, steps = len(states), shape.topk, shape.num_steps
    probs = torch.stack([s.topk_probs for s in states])  # [B, K]
    ids = torch.stack([s.topk_ids for s in states])  # [B, K]
    root_hidden = torch.stack([s.hidden for s in states])  # [B, H]
    hidden_size = root_hidden.shape[-1]
    scratch_positions = seq_t[:, None] + torch.arange(steps * topk, device=runner.device)
    scratch = runner.slots_at(rows_t[:, None], scratch_positions).view(batch, steps, topk)

    step: TreeStep = ops.grow_tree_step(probs, ids, None)
    tree_steps = [step]
    parents = [step.parent_branches]
    frontier_hidden = root_hidden[:, None, :].expand(batch, topk, hidden_size).reshape(-1, hidden_size)
    batch_index = torch.arange(batch, device=runner.device)[:, None]
    for depth_index in range(steps - 1):  # run the frontier of depth depth_index + 1
        kv_slots = ops.draft_kv_slots(scratch, parents, depth_index)  # [B * K, depth_index + 1]
        positions = (seq_t + depth_index)[:, None].expand(batch, topk)
        forward = runner.make_batch(
            ForwardMode.DRAFT_DECODE,
            input_ids=step.tokens,
            positions=positions,
            rows=rows,
            prefix_lens=seq_lens,
            extend_lens=[topk] * batch,
            out_cache_loc=scratch[:, depth_index, :],
            draft_kv_slots=kv_slots.to(runner.slot_dtype),
            num_branches=topk,
        )
        hidden_out = runner.run_draft(forward, frontier_hidden)  # [B * K, H]
        child_probs, child_ids = draft.topk(hidden_out, topk)  # [B * K, K]
        step = ops.grow_tree_step(child_probs, child_ids, step)
        tree_steps.append(step)
        parents.append(step.parent_branches)
        frontier_hidden = hidden_out.view(batch, topk, hidden_size)[
            batch_index, step.parent_branches
        ].reshape(-1, hidden_size)
    tree = ops.organize_draft_tree(tree_steps, shape.num_draft_tokens)
    return ops.build_verify_tree(
        roots, tree.tokens, tree.parents, seq_t, runner.tree_mask_mode,
        seq_lens_sum=sum(seq_lens),
    )


def draft_chain(
    runner: ModelRunner,
    ops: SamplingOps,
    steps: int,
    states: Sequence[DraftState],
    rows: Sequence[int],
    rows_t: torch.Tensor,
    seq_lens: Sequence[int],
    seq_t: torch.Tensor,
    roots: torch.Tensor,
) -> VerifyTree:
    """The top-1 fast path: S greedy draft tokens per request, each attending to the
    prefix and the chain before it; no candidate scoring, selection or reordering."""
    batch = len(states)
    tokens = [torch.stack([s.topk_ids[0] for s in states])]  # S x [B]
    hidden = torch.stack([s.hidden for s in states])  # [B, H]
    scratch = runner.slots_at(rows_t[:, None], seq_t[:, None] + torch.arange(steps, device=runner.device))  # [B, S]
    for depth_index in range(steps - 1):
        forward = runner.make_batch(
            ForwardMode.DRAFT_DECODE,
            input_ids=tokens[-1][:, None],
            positions=(seq_t + depth_index)[:, None],
            rows=rows,
            prefix_lens=seq_lens,
            extend_lens=[1] * batch,
            out_cache_loc=scratch[:, depth_index : depth_index + 1],
            draft_kv_slots=scratch[:, : depth_index + 1].to(runner.slot_dtype),
            num_branches=1,
        )
        hidden = runner.run_draft(forward, hidden)  # [B, H]
        _, ids = runner.draft.topk(hidden, 1)  # [B, 1]
        tokens.append(ids[:, 0])
    chain = torch.stack(tokens, dim=1)  # [B, S]
    parents = torch.arange(steps, device=runner.device).expand(batch, steps)  # node i's parent: i - 1
    return ops.build_verify_tree(
        roots, chain, parents, seq_t, runner.tree_mask_mode, seq_lens_sum=sum(seq_lens),
    )


def single_node_tree(
    ops: SamplingOps,
    roots: torch.Tensor,
    seq_lens: torch.Tensor,
    mask_mode: str = TreeMaskMode.TREE_BLOCK,
) -> VerifyTree:
    """A verify 'tree' of the root alone: plain decoding (and prefill's first token)."""
    empty = torch.empty(roots.shape[0], 0, dtype=torch.int64, device=roots.device)
    if mask_mode == TreeMaskMode.FULL:
        mask_mode = TreeMaskMode.TREE_BLOCK  # a one-node tree needs no mask
    return ops.build_verify_tree(roots, empty, empty, seq_lens, mask_mode)
