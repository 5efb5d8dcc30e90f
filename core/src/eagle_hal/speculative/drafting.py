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
from eagle_hal.hal.sampling import NO_NODE, SamplingOps, TreeShape, TreeStep, VerifyTree

__all__ = [
    "DraftInputs",
    "DraftState",
    "DraftStates",
    "chain_layout",
    "chain_tree",
    "draft_chain",
    "draft_tree",
    "single_node_tree",
]


class DraftState(NamedTuple):
    """What the last draft extend left for a request (or, stacked, for a batch)."""

    topk_probs: torch.Tensor  # [K] float32 draft probabilities of the root's children
    topk_ids: torch.Tensor  # [K] int64 their target-vocabulary token ids
    hidden: torch.Tensor  # [H] the draft's output hidden state at the last position


class DraftStates:
    """Every running request's ``DraftState``, as the last draft extend (eager, or inside an
    overlapped iteration's graph) left it. A batch's extend leaves one stacked state; each
    of its requests keeps a row of it, and the whole stack is handed back as it is while
    the same batch, in the same order, asks again (the usual case)."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[DraftState, int]] = {}  # request -> (stacked state, row)
        self._batch: tuple[tuple[int, ...], DraftState] | None = None

    def store(self, request_ids: Sequence[int], state: DraftState,
              kept: Sequence[bool] | None = None) -> None:
        """``state`` (stacked ``[B, ...]``) for requests ``request_ids`` in its row order;
        ``kept``: only the rows marked true (the others' requests left the batch)."""
        keep = [True] * len(request_ids) if kept is None else list(kept)
        # a batch with rows dropped no longer describes anyone's state as a batch
        self._batch = (tuple(request_ids), state) if all(keep) else None
        for row, (request_id, k) in enumerate(zip(request_ids, keep, strict=True)):
            if k:
                self._rows[request_id] = (state, row)

    def stacked(self, request_ids: Sequence[int]) -> DraftState:
        """The states of ``request_ids`` stacked ``[B, ...]`` in that order."""
        key = tuple(request_ids)
        if self._batch is not None and self._batch[0] == key:
            return self._batch[1]
        parts = [self._rows[i] for i in key]
        return DraftState(*(torch.stack([s[i][b] for s, b in parts]) for i in range(3)))

    def drop(self, request_id: int) -> None:
        """Forget a request (finished or preempted); the batch's stack goes with it."""
        self._rows.pop(request_id, None)
        self._batch = None


class DraftInputs(NamedTuple):
    """One decode iteration's batch as the draft loop needs it, uploaded once."""

    rows: Sequence[int]
    seq_lens: Sequence[int]
    rows_t: torch.Tensor  # [B] int64 table rows
    seq_t: torch.Tensor  # [B] int64 cached lengths (the roots' positions)
    branches_t: torch.Tensor  # [B] int64 K: the extend length of every draft step
    scratch: torch.Tensor  # [B, >= S * K] slots of positions seq_len, seq_len + 1, ...
    positions: torch.Tensor  # [S, B * K] int64 draft position of step d's tokens
    roots: torch.Tensor  # [B] int64 root tokens
    state: DraftState  # [B, K], [B, K], [B, H]


def draft_tree(
    runner: ModelRunner, ops: SamplingOps, shape: TreeShape, inputs: DraftInputs
) -> VerifyTree:
    """Draft S levels for every request and lay out the verify tree (root = ``roots``).
    A chain (K = 1, N = S + 1) takes ``draft_chain``, which needs no tree bookkeeping. With
    graphs on, the whole loop replays as one graph where it can
    (``GraphRunner.run_draft_tree``); otherwise level by level, each level's forward still
    replaying its own graph where one applies."""
    if shape.topk == 1 and shape.num_draft_tokens == shape.num_steps + 1:
        return draft_chain(runner, ops, shape.num_steps, inputs)
    if runner.graphs is not None:  # the whole loop as one graph where it can
        replayed = runner.graphs.run_draft_tree(
            ops, shape, inputs.rows_t, inputs.seq_t, inputs.seq_lens, inputs.scratch,
            inputs.state.topk_probs, inputs.state.topk_ids, inputs.state.hidden, inputs.roots,
        )
        if replayed is not None:
            return replayed
    draft = runner.draft
    batch, topk, steps = len(inputs.rows), shape.topk, shape.num_steps
    probs, ids, root_hidden = inputs.state  # [B, K], [B, K], [B, H]
    hidden_size = root_hidden.shape[-1]
    scratch = inputs.scratch[:, : steps * topk].view(batch, steps, topk)
    device_lens = (inputs.rows_t, inputs.seq_t, inputs.branches_t)

    step: TreeStep = ops.grow_tree_step(probs, ids, None)
    tree_steps = [step]
    parents = [step.parent_branches]
    frontier_hidden = root_hidden[:, None, :].expand(batch, topk, hidden_size).reshape(
        -1, hidden_size
    )
    batch_index = torch.arange(batch, device=runner.device)[:, None]
    for depth_index in range(steps - 1):  # run the frontier of depth depth_index + 1
        kv_slots = ops.draft_kv_slots(scratch, parents, depth_index)  # [B * K, depth_index + 1]
        forward = runner.make_batch(
            ForwardMode.DRAFT_DECODE,
            input_ids=step.tokens,
            positions=inputs.positions[depth_index],
            rows=inputs.rows,
            prefix_lens=inputs.seq_lens,
            extend_lens=[topk] * batch,
            out_cache_loc=scratch[:, depth_index, :],
            draft_kv_slots=kv_slots.to(runner.slot_dtype),
            num_branches=topk,
            device_lens=device_lens,
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
        inputs.roots, tree.tokens, tree.parents, inputs.seq_t, runner.tree_mask_mode,
        seq_lens_sum=sum(inputs.seq_lens),
    )


def draft_chain(
    runner: ModelRunner, ops: SamplingOps, steps: int, inputs: DraftInputs
) -> VerifyTree:
    """The top-1 fast path: S greedy draft tokens per request, each attending to the
    prefix and the chain before it; no candidate scoring, selection or reordering.

    With graphs on, the whole loop and the chain's verify layout replay as one graph
    (``GraphRunner.run_draft_chain``); otherwise, or when that declines (no bucket fits,
    an attention backend without ``multi_forward_graphs``, ``FULL`` masks), step by step,
    each step's forward still replaying its own graph where one applies."""
    if runner.graphs is not None:
        tree = runner.graphs.run_draft_chain(
            steps, inputs.rows_t, inputs.seq_t, inputs.seq_lens, inputs.scratch,
            inputs.state.topk_ids[:, 0], inputs.state.hidden, inputs.roots,
        )
        if tree is not None:
            return tree
    batch = len(inputs.rows)
    tokens = [inputs.state.topk_ids[:, 0]]  # S x [B]
    hidden = inputs.state.hidden  # [B, H]
    scratch = inputs.scratch[:, :steps]  # [B, S]
    device_lens = (inputs.rows_t, inputs.seq_t, inputs.branches_t)
    for depth_index in range(steps - 1):
        forward = runner.make_batch(
            ForwardMode.DRAFT_DECODE,
            input_ids=tokens[-1],
            positions=inputs.positions[depth_index],
            rows=inputs.rows,
            prefix_lens=inputs.seq_lens,
            extend_lens=[1] * batch,
            out_cache_loc=scratch[:, depth_index],
            draft_kv_slots=scratch[:, : depth_index + 1].to(runner.slot_dtype),
            num_branches=1,
            device_lens=device_lens,
        )
        hidden = runner.run_draft(forward, hidden)  # [B, H]
        _, ids = runner.draft.topk(hidden, 1)  # [B, 1]
        tokens.append(ids[:, 0])
    chain = torch.stack(tokens, dim=1)  # [B, S]
    return chain_tree(ops, inputs.roots, chain, inputs.seq_t, runner.tree_mask_mode,
                      sum(inputs.seq_lens))


def chain_tree(
    ops: SamplingOps,
    roots: torch.Tensor,
    chain: torch.Tensor,
    seq_lens: torch.Tensor,
    mask_mode: str,
    seq_lens_sum: int,
) -> VerifyTree:
    """The verify tree of a chain (node i's parent is i - 1), written out directly: the
    layout ``build_verify_tree`` gives a chain, in a handful of ops."""
    if mask_mode == TreeMaskMode.FULL:
        parents = torch.arange(chain.shape[1], device=chain.device).expand_as(chain)
        return ops.build_verify_tree(roots, chain, parents, seq_lens, mask_mode, seq_lens_sum)
    return chain_layout(roots, chain, seq_lens, mask_mode)


def chain_layout(
    roots: torch.Tensor,
    chain: torch.Tensor,
    seq_lens: torch.Tensor,
    mask_mode: str,
    cache: dict[object, tuple[torch.Tensor, ...]] | None = None,
) -> VerifyTree:
    """``chain_tree`` in the ``TREE_BLOCK`` and ``BIT_PACKED`` layouts: device work on
    ``roots`` ``[B]``, ``chain`` ``[B, S]`` and ``seq_lens`` ``[B]`` only, so it can be
    captured (``FULL`` needs the host's sum of the lengths: use ``chain_tree``). Only the
    tokens and positions depend on them: ``cache`` keeps the rest (index, links, mask),
    which depends on the shape alone, for the next call; it is never written to."""
    if mask_mode == TreeMaskMode.FULL:
        raise ValueError("a FULL tree mask is sized by the prefix lengths: use chain_tree")
    batch, num_nodes = chain.shape[0], chain.shape[1] + 1
    device = chain.device
    key = (batch, num_nodes, device, mask_mode)
    parts = cache.get(key) if cache is not None else None
    if parts is None:
        parts = _chain_parts(batch, num_nodes, device, mask_mode)
        if cache is not None:
            cache[key] = parts
    node, retrieve_index, next_token, next_sibling, tree_mask = parts
    tokens = torch.cat([roots.view(-1, 1), chain.long()], dim=1)  # [B, N]
    positions = seq_lens.view(-1, 1) + node
    return VerifyTree(tokens, positions, retrieve_index, next_token, next_sibling, tree_mask,
                      mask_mode)


def _chain_parts(
    batch: int, num_nodes: int, device: torch.device, mask_mode: str
) -> tuple[torch.Tensor, ...]:
    """A chain's node numbers ``[N]`` and the layout tensors that depend on its shape only."""
    node = torch.arange(num_nodes, device=device)
    retrieve_index = torch.arange(batch * num_nodes, device=device).view(batch, num_nodes)
    next_token = torch.where(node < num_nodes - 1, node + 1, NO_NODE)
    next_token = next_token.expand(batch, -1).contiguous()
    next_sibling = torch.full((batch, num_nodes), NO_NODE, dtype=torch.int64, device=device)
    visible = node.view(-1, 1) >= node.view(1, -1)  # [N, N] node i sees 0..i
    if mask_mode == TreeMaskMode.TREE_BLOCK:
        tree_mask = visible.expand(batch, -1, -1).contiguous()
    else:  # bit-packed: bit j of entry i set for j <= i (distinct bits: the sum is the OR)
        bits = torch.ones_like(node) << node
        tree_mask = (visible.long() * bits).sum(dim=1).expand(batch, -1).contiguous()
    return node, retrieve_index, next_token, next_sibling, tree_mask


def single_node_tree(
    roots: torch.Tensor,
    seq_lens: torch.Tensor,
    mask_mode: str = TreeMaskMode.TREE_BLOCK,
    cache: dict[object, tuple[torch.Tensor, ...]] | None = None,
) -> VerifyTree:
    """A verify 'tree' of the root alone: plain decoding (and prefill's first token).
    ``cache`` keeps the parts that depend only on the batch size (links, index, mask) for
    the next call; they are never written to."""
    batch, device = roots.shape[0], roots.device
    if mask_mode != TreeMaskMode.BIT_PACKED:
        # a one-node tree needs no prefix columns, so FULL falls back to TREE_BLOCK
        mask_mode = TreeMaskMode.TREE_BLOCK
    key = (batch, device, mask_mode)
    parts = cache.get(key) if cache is not None else None
    if parts is None:
        links = torch.full((2, batch, 1), NO_NODE, dtype=torch.int64, device=device)
        retrieve_index = torch.arange(batch, device=device).view(batch, 1)
        if mask_mode == TreeMaskMode.BIT_PACKED:
            tree_mask = torch.ones(batch, 1, dtype=torch.int64, device=device)
        else:
            tree_mask = torch.ones(batch, 1, 1, dtype=torch.bool, device=device)
        parts = (links[0], links[1], retrieve_index, tree_mask)
        if cache is not None:
            cache[key] = parts
    next_token, next_sibling, retrieve_index, tree_mask = parts
    return VerifyTree(roots.long().view(batch, 1), seq_lens.long().view(batch, 1),
                      retrieve_index, next_token, next_sibling, tree_mask, mask_mode)
