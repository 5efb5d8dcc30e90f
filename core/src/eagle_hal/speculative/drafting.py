"""Growing the draft tree: S levels of top-K expansion through the draft model.

The draft's scratch KV for the draft token at depth d (1-based), branch k of a request lives
at position ``seq_len + (d - 1) * K + k`` of the request's reserved block; only depths
``1 .. S - 1`` are ever run through the draft (the last level is only scored). Each branch
attends to its request's cached prefix plus its own ancestors (``draft_kv_slots``).

With graphs on, the whole loop replays as one device graph where the graph runner can
(``GraphRunner.can_replay_draft_loop``), and what that graph records is this module's own
loop, handed to it as the body: ``_chain_loop`` for a chain (K = 1), the tree's level
growth (``_grow_levels``, which the level-by-level path runs too) for a tree. Otherwise
the loop runs level by level, each level's forward still replaying its own graph where one
applies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.sampling import NO_NODE, SamplingOps, TreeShape, TreeStep, VerifyTree
from eagle_hal.hal.tree_mask import TreeMaskMode

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.engine.graphs.draft_loop import DraftLoop
    from eagle_hal.engine.runner import ModelRunner

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

    table_rows: Sequence[int]
    seq_lens: Sequence[int]
    table_rows_device: torch.Tensor  # [B] int64 table rows
    seq_lens_device: torch.Tensor  # [B] int64 cached lengths (the roots' positions)
    branches_device: torch.Tensor  # [B] int64 K: the extend length of every draft step
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
    (``GraphRunner.can_replay_draft_loop``); otherwise level by level, each level's forward
    still replaying its own graph where one applies."""
    if shape.topk == 1 and shape.num_draft_tokens == shape.num_steps + 1:
        return draft_chain(runner, ops, shape.num_steps, inputs)
    graphs = runner.graphs
    if graphs is not None and graphs.can_replay_draft_loop(shape, inputs):
        return graphs.replay_draft_loop(
            shape, inputs, functools.partial(_tree_loop, runner.draft, ops)
        )
    batch, topk, steps = len(inputs.table_rows), shape.topk, shape.num_steps
    scratch = inputs.scratch[:, : steps * topk].view(batch, steps, topk)
    device_lens = (inputs.table_rows_device, inputs.seq_lens_device, inputs.branches_device)

    def run_level(depth_index: int, tokens: torch.Tensor, frontier: torch.Tensor,
                  kv_slots: torch.Tensor) -> torch.Tensor:
        forward = runner.make_batch(
            ForwardMode.DRAFT_DECODE,
            input_ids=tokens,
            positions=inputs.positions[depth_index],
            table_rows=inputs.table_rows,
            prefix_lens=inputs.seq_lens,
            extend_lens=[topk] * batch,
            out_cache_loc=scratch[:, depth_index, :],
            draft_kv_slots=kv_slots.to(runner.slot_dtype),
            num_branches=topk,
            device_lens=device_lens,
        )
        return runner.run_draft(forward, frontier)  # [B * K, H]

    probs, ids, root_hidden = inputs.state  # [B, K], [B, K], [B, H]
    batch_index = torch.arange(batch, device=runner.device)[:, None]
    tree_steps = _grow_levels(runner.draft, ops, steps, probs, ids, root_hidden, scratch,
                              batch_index, run_level)
    tree = ops.organize_draft_tree(tree_steps, shape.num_draft_tokens)
    return ops.build_verify_tree(
        inputs.roots, tree.tokens, tree.parents, inputs.seq_lens_device, runner.tree_mask_mode,
        seq_lens_sum=sum(inputs.seq_lens),
    )


# (depth index d, the level's tokens [B, K], its hidden states [B * K, H], its ancestors'
# slots [B * K, d + 1]) -> the draft's hidden states [B * K, H]
RunLevel = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _grow_levels(
    draft: Any,
    ops: SamplingOps,
    steps: int,
    probs: torch.Tensor,
    ids: torch.Tensor,
    root_hidden: torch.Tensor,
    slots: torch.Tensor,
    batch_index: torch.Tensor,
    run_level: RunLevel,
) -> list[TreeStep]:
    """The tree steps of S levels grown from the root's children (``probs``/``ids``
    ``[B, K]``, ``root_hidden`` ``[B, H]``): each of the S - 1 frontiers runs through the
    draft (``run_level``, attending to its ancestors' ``slots`` ``[B, S, K]``), its lm_head
    top-K is scored (``SamplingOps.grow_tree_step``: K*K candidates, the best K kept) and
    the kept branches' parents' hidden states are gathered. ``batch_index``: ``[B, 1]``
    row numbers. The level-by-level path and the draft-loop graph run it alike."""
    batch, topk = ids.shape
    hidden_size = root_hidden.shape[-1]
    step: TreeStep = ops.grow_tree_step(probs, ids, None)
    tree_steps = [step]
    parents = [step.parent_branches]
    frontier = root_hidden[:, None, :].expand(batch, topk, hidden_size).reshape(-1, hidden_size)
    for depth_index in range(steps - 1):  # run the frontier of depth depth_index + 1
        kv_slots = ops.draft_kv_slots(slots, parents, depth_index)  # [B * K, depth_index + 1]
        hidden_out = run_level(depth_index, step.tokens, frontier, kv_slots)  # [B * K, H]
        child_probs, child_ids = draft.topk(hidden_out, topk)  # [B * K, K]
        step = ops.grow_tree_step(child_probs, child_ids, step)
        tree_steps.append(step)
        parents.append(step.parent_branches)
        frontier = hidden_out.view(batch, topk, hidden_size)[
            batch_index, step.parent_branches
        ].reshape(-1, hidden_size)
    return tree_steps


def _tree_loop(draft: Any, ops: SamplingOps, loop: DraftLoop) -> VerifyTree:
    """The tree's draft loop over a draft-loop graph's static inputs (the body that graph
    records): ``_grow_levels`` with each level's ancestor slots set on its static batch
    (the attention backend reads them in its forward), then the verify tree."""
    constants = loop.constants
    batch_index = constants.get("batch_index")
    if batch_index is None:  # built at the warm-up, outside the graph
        batch_index = torch.arange(loop.table_rows.shape[0], device=loop.table_rows.device)[:, None]
        constants["batch_index"] = batch_index

    def run_level(depth_index: int, tokens: torch.Tensor, frontier: torch.Tensor,
                  kv_slots: torch.Tensor) -> torch.Tensor:
        # the level's slots and tokens are read where they were computed (no copy into the
        # static batch: the backend reads draft_kv_slots in its forward)
        static = loop.steps[depth_index]
        static.draft_kv_slots = kv_slots
        return loop.forward(static, tokens.reshape(-1), frontier)

    slots = loop.scratch.contiguous()  # one copy for every level (none at bucket 1)
    assert loop.probs is not None
    tree_steps = _grow_levels(draft, ops, loop.shape.num_steps, loop.probs, loop.ids,
                              loop.hidden, slots, batch_index, run_level)
    tree = ops.organize_draft_tree(tree_steps, loop.shape.num_draft_tokens)
    return ops.build_verify_tree(loop.roots, tree.tokens, tree.parents, loop.seq_lens,
                                 loop.mask_mode)


def draft_chain(
    runner: ModelRunner, ops: SamplingOps, steps: int, inputs: DraftInputs
) -> VerifyTree:
    """The top-1 fast path: S greedy draft tokens per request, each attending to the
    prefix and the chain before it; no candidate scoring, selection or reordering.

    With graphs on, the whole loop and the chain's verify layout replay as one graph
    (``GraphRunner.can_replay_draft_loop``); otherwise, or when that declines (no bucket
    fits, an attention backend without ``multi_forward_graphs``, ``FULL`` masks), step by
    step, each step's forward still replaying its own graph where one applies."""
    graphs = runner.graphs
    if graphs is not None:
        shape = _chain_shape(steps)
        if graphs.can_replay_draft_loop(shape, inputs):
            return graphs.replay_draft_loop(
                shape, inputs, functools.partial(_chain_loop, runner.draft)
            )
    batch = len(inputs.table_rows)
    tokens = [inputs.state.topk_ids[:, 0]]  # S x [B]
    hidden = inputs.state.hidden  # [B, H]
    scratch = inputs.scratch[:, :steps]  # [B, S]
    device_lens = (inputs.table_rows_device, inputs.seq_lens_device, inputs.branches_device)
    for depth_index in range(steps - 1):
        forward = runner.make_batch(
            ForwardMode.DRAFT_DECODE,
            input_ids=tokens[-1],
            positions=inputs.positions[depth_index],
            table_rows=inputs.table_rows,
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
    return chain_tree(ops, inputs.roots, chain, inputs.seq_lens_device, runner.tree_mask_mode,
                      sum(inputs.seq_lens))


@functools.cache
def _chain_shape(steps: int) -> TreeShape:
    return TreeShape(steps, 1, steps + 1)


def _chain_loop(draft: Any, loop: DraftLoop) -> VerifyTree:
    """The chain's draft loop over a draft-loop graph's static inputs (the body that graph
    records): step d's forward reads its input ids from ``tokens[d]`` and writes its top-1
    into ``tokens[d + 1]``; then ``chain_layout``, whose parts that depend on the shape
    alone are built once (at the warm-up) and kept in the graph's constants."""
    state = loop.hidden
    for depth_index, static in enumerate(loop.steps):
        state = loop.forward(static, static.input_ids, state)  # [bucket, H]
        _, ids = draft.topk(state, 1)  # [bucket, 1]
        loop.tokens[depth_index + 1].copy_(ids[:, 0])
    return chain_layout(loop.roots, loop.tokens.t(), loop.seq_lens, loop.mask_mode,
                        loop.constants)


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
