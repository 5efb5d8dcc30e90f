"""Pure-torch draft-tree growth, organisation and verify-tree layout (any device).

Vectorised over the batch; the only Python loops run over tree depth (pointer doubling,
at most ceil(log2 N) rounds), never over requests or nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from eagle_hal.hal.sampling import NO_NODE, DraftTree, TreeConfigError, TreeStep, VerifyTree
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.reference_checks import check_dims, check_mask_mode, check_rows, check_same_shape

__all__ = [
    "ancestor_mask",
    "build_verify_tree",
    "check_grown_step",
    "check_num_drafts",
    "first_candidate_id",
    "grow_tree_step",
    "organize_draft_tree",
]


def first_candidate_id(depth: int, topk: int) -> int:
    """The candidate id of the first candidate at ``depth`` (ids count from 1; 0 = root)."""
    return 1 if depth == 1 else 1 + topk + (depth - 2) * topk * topk


def _best_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k highest scores per row, ties to the lower index. [B, k]"""
    # A stable descending sort keeps equal scores in index order, which makes the choice
    # deterministic on every device (topk's tie order is unspecified).
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]


def check_grown_step(
    topk_probs: torch.Tensor, topk_ids: torch.Tensor, previous: TreeStep
) -> tuple[int, int]:
    """``(B, K)`` of a step past depth 1, whose inputs must be ``[B*K, K]`` (or ``[B, K,
    K]``) for ``previous``'s frontier ``[B, K]``; raises ``TreeConfigError``."""
    batch_size, topk = previous.scores.shape
    if topk_probs.shape != topk_ids.shape or topk_probs.numel() != batch_size * topk * topk:
        raise TreeConfigError(
            f"step at depth {previous.depth + 1} needs topk_probs/topk_ids of shape "
            f"[B*K, K] = [{batch_size * topk}, {topk}] (or [B, K, K]); got "
            f"{tuple(topk_probs.shape)} and {tuple(topk_ids.shape)}"
        )
    return batch_size, topk


def grow_tree_step(
    topk_probs: torch.Tensor, topk_ids: torch.Tensor, previous: TreeStep | None
) -> TreeStep:
    if previous is None:
        check_dims("topk_probs", topk_probs, 2)
        check_same_shape(topk_probs=topk_probs, topk_ids=topk_ids)
        batch_size, topk = topk_probs.shape
        scores = topk_probs.float()  # [B, K]
        tokens = topk_ids.long()
        node_ids = torch.arange(1, topk + 1, device=scores.device).expand(batch_size, topk)
        root_parents = torch.zeros_like(tokens)
        return TreeStep(1, scores, tokens, root_parents, node_ids, scores, tokens, root_parents)

    batch_size, topk = check_grown_step(topk_probs, topk_ids, previous)
    # Candidate k*K + j is child j of frontier branch k.
    child_probs = topk_probs.reshape(batch_size, topk, topk).float()
    candidate_scores = (previous.scores.unsqueeze(2) * child_probs).reshape(batch_size, -1)
    candidate_tokens = topk_ids.reshape(batch_size, topk * topk).long()  # [B, K*K]
    candidate_parents = (
        previous.node_ids.unsqueeze(2).expand(batch_size, topk, topk).reshape(batch_size, -1)
    )  # [B, K*K]: candidate k*K + j hangs off frontier node k

    chosen = _best_k(candidate_scores, topk)  # [B, K] in [0, K*K)
    depth = previous.depth + 1
    return TreeStep(
        depth=depth,
        scores=candidate_scores.gather(1, chosen),
        tokens=candidate_tokens.gather(1, chosen),
        parent_branches=torch.div(chosen, topk, rounding_mode="floor"),
        node_ids=chosen + first_candidate_id(depth, topk),
        candidate_scores=candidate_scores,
        candidate_tokens=candidate_tokens,
        candidate_parents=candidate_parents,
    )


def check_num_drafts(
    steps: Sequence[TreeStep], num_candidates: int, num_draft_tokens: int
) -> int:
    """``N - 1``, the drafts ``organize_draft_tree`` selects from the ``num_candidates`` of
    ``steps``; raises ``TreeConfigError`` unless ``0 <= N - 1 <= num_candidates``."""
    num_drafts = num_draft_tokens - 1
    if num_drafts < 0 or num_drafts > num_candidates:
        raise TreeConfigError(
            f"num_draft_tokens - 1 = {num_drafts} must be in [0, {num_candidates}], the "
            f"candidates of {len(steps)} steps (K + (S-1)*K*K)"
        )
    return num_drafts


def organize_draft_tree(steps: Sequence[TreeStep], num_draft_tokens: int) -> DraftTree:
    if not steps:
        raise TreeConfigError("organize_draft_tree needs at least one grown step")
    scores = torch.cat([s.candidate_scores for s in steps], dim=1)  # [B, M]
    tokens = torch.cat([s.candidate_tokens for s in steps], dim=1)
    parents = torch.cat([s.candidate_parents for s in steps], dim=1)
    batch_size, num_candidates = scores.shape
    num_drafts = check_num_drafts(steps, num_candidates, num_draft_tokens)
    device = scores.device
    if num_drafts == num_candidates:
        selected = torch.arange(num_candidates, device=device).expand(batch_size, -1)
    else:
        # Order: score descending, then candidate index. A child never outscores its parent
        # and has a larger index, so every selected node's parent is selected too.
        selected = _best_k(scores, num_drafts).sort(dim=1).values  # [B, N-1]
    candidate_ids = selected + 1
    # Map candidate id -> verify node (id 0, the root, stays node 0).
    node_of = torch.zeros(batch_size, num_candidates + 1, dtype=torch.long, device=device)
    node_numbers = torch.arange(1, num_drafts + 1, device=device).expand(batch_size, -1)
    node_of.scatter_(1, candidate_ids, node_numbers)
    draft_parents = node_of.gather(1, parents.gather(1, selected))
    return DraftTree(tokens.gather(1, selected), draft_parents, candidate_ids)


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """``parents [B, N]`` (node 0's parent is itself) -> bool ``[B, N, N]``: j is i or an
    ancestor of i. Pointer doubling: after round r each row holds the ancestors within
    2**r steps, so ceil(log2 N) rounds cover any depth."""
    batch_size, num_nodes = parents.shape
    node = torch.arange(num_nodes, device=parents.device)
    visible = (node.view(1, -1, 1) == node.view(1, 1, -1)) | (
        parents.unsqueeze(2) == node.view(1, 1, -1)
    )  # [B, N, N] self or parent
    jump = parents
    reach = 1
    while reach < num_nodes - 1:
        visible = visible | visible.gather(1, jump.unsqueeze(2).expand(-1, -1, num_nodes))
        jump = jump.gather(1, jump)
        reach *= 2
    return visible


def build_verify_tree(
    root_tokens: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_parents: torch.Tensor,
    seq_lens: torch.Tensor,
    mask_mode: str,
    seq_lens_sum: int | None = None,
) -> VerifyTree:
    check_dims("draft_tokens", draft_tokens, 2)
    check_same_shape(draft_tokens=draft_tokens, draft_parents=draft_parents)
    batch_size, num_nodes = draft_tokens.shape[0], draft_tokens.shape[1] + 1
    check_rows("root_tokens", root_tokens, batch_size)
    check_rows("seq_lens", seq_lens, batch_size)
    check_mask_mode(mask_mode, num_nodes, seq_lens_sum)
    device = draft_tokens.device

    tokens = torch.cat([root_tokens.long().view(-1, 1), draft_tokens.long()], dim=1)  # [B, N]
    parents = torch.cat(
        [torch.zeros(batch_size, 1, dtype=torch.long, device=device), draft_parents.long()], 1
    )  # [B, N], the root is its own parent
    visible = ancestor_mask(parents)  # [B, N, N]
    depth = visible.sum(dim=2) - 1
    positions = seq_lens.long().view(-1, 1) + depth
    node = torch.arange(num_nodes, device=device)
    retrieve_index = node + num_nodes * torch.arange(batch_size, device=device).view(-1, 1)

    is_draft = (node >= 1).view(1, 1, -1)
    child = (parents.unsqueeze(1) == node.view(1, -1, 1)) & is_draft  # [B, i, j]: j child of i
    sibling = (
        (parents.unsqueeze(1) == parents.unsqueeze(2))
        & (node.view(1, 1, -1) > node.view(1, -1, 1))
        & is_draft
        & (node >= 1).view(1, -1, 1)
    )  # [B, i, j]: j a later sibling of i
    next_token = _first_set(child, num_nodes)
    next_sibling = _first_set(sibling, num_nodes)

    if mask_mode == TreeMaskMode.TREE_BLOCK:
        tree_mask = visible
    elif mask_mode == TreeMaskMode.BIT_PACKED:
        bits = torch.ones(num_nodes, dtype=torch.long, device=device) << node
        tree_mask = (visible.long() * bits).sum(dim=2)  # distinct bits: the sum is the OR
    else:
        assert seq_lens_sum is not None
        tree_mask = _full_mask(visible, seq_lens.long(), seq_lens_sum)
    return VerifyTree(
        tokens, positions, retrieve_index, next_token, next_sibling, tree_mask, mask_mode
    )


def _first_set(flags: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Per row, the lowest column where ``flags [B, N, N]`` is set, else NO_NODE. [B, N]"""
    node = torch.arange(num_nodes, device=flags.device)
    first = torch.where(flags, node, num_nodes).min(dim=2).values
    return torch.where(first == num_nodes, NO_NODE, first)


def _full_mask(visible: torch.Tensor, seq_lens: torch.Tensor, seq_lens_sum: int) -> torch.Tensor:
    """Concatenate, per request, ``[N, seq_len + N]`` blocks: prefix all True, then the
    tree block. Indexing is computed per element, so no size is read back."""
    batch_size, num_nodes, _ = visible.shape
    device = visible.device
    row_len = seq_lens + num_nodes  # [B]
    block_size = row_len * num_nodes
    block_end = torch.cumsum(block_size, dim=0)
    total = num_nodes * (seq_lens_sum + batch_size * num_nodes)
    flat = torch.arange(total, device=device)
    request = torch.searchsorted(block_end, flat, right=True).clamp(max=batch_size - 1)
    local = flat - (block_end - block_size)[request]
    row = torch.div(local, row_len[request], rounding_mode="floor")
    tree_col = local - row * row_len[request] - seq_lens[request]
    in_tree = visible[request, row.clamp(max=num_nodes - 1), tree_col.clamp(min=0)]
    return (tree_col < 0) | in_tree
