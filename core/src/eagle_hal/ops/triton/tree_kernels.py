"""Triton kernels of the draft tree: one step of its growth, and the verify tree's layout
(tokens, positions, retrieve links, tree mask).

``grow_tree_kernel``: one program per request scores its K * K candidates and picks the K
best (ties to the lower index) by K masked max-reductions, in the order a stable
descending sort gives. ``organize_tree_kernel``: one program per request ranks all its
candidates against each other at once (a ``[BLOCK, BLOCK]`` comparison), keeps the N - 1
best in candidate order and maps each parent's candidate id to its verify node.
``build_tree_kernel``: one program per (request, node). The node walks up its parent chain
to collect its ancestors (the mask row) and its depth; first child and next sibling come
from one masked vector reduction over the request's parents. Written for any Triton
target: no warp-size assumption, every block a power of two with masked tails.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = [
    "MASK_BIT_PACKED", "MASK_FULL", "MASK_TREE_BLOCK", "build_tree_kernel", "grow_tree_kernel",
    "organize_tree_kernel",
]

MASK_TREE_BLOCK = 0
MASK_BIT_PACKED = 1
MASK_FULL = 2


@triton.jit
def build_tree_kernel(
    root_tokens_ptr,  # [B] int64
    draft_tokens_ptr,  # [B, N-1] int64
    draft_parents_ptr,  # [B, N-1] int64, verify node of each draft's parent
    seq_lens_ptr,  # [B] int64
    tokens_ptr,  # out [B, N]
    positions_ptr,  # out [B, N]
    retrieve_index_ptr,  # out [B, N]
    next_token_ptr,  # out [B, N]
    next_sibling_ptr,  # out [B, N]
    mask_ptr,  # out: int8 [B, N, N] | int64 [B, N] | int8 flat (FULL)
    mask_block_start_ptr,  # [B] int64 start of each request's FULL block (unused otherwise)
    num_nodes,
    MASK_MODE: tl.constexpr,
    BLOCK_NODES: tl.constexpr,
    BLOCK_PREFIX: tl.constexpr,
):
    request = tl.program_id(0).to(tl.int64)
    node = tl.program_id(1).to(tl.int64)
    lane = tl.arange(0, BLOCK_NODES).to(tl.int64)
    in_tree = lane < num_nodes
    drafts_base = request * (num_nodes - 1)
    out_index = request * num_nodes + node

    # parents[j] for every node j of this request; the root is its own parent.
    parents = tl.load(draft_parents_ptr + drafts_base + lane - 1, mask=(lane >= 1) & in_tree,
                      other=0)

    # Walk to the root: each ancestor becomes visible, each hop adds one to the depth.
    visible = (lane == node) | (lane == 0)
    current = node
    depth = node * 0
    while current != 0:
        current = tl.load(draft_parents_ptr + drafts_base + current - 1)
        visible = visible | (lane == current)
        depth += 1

    root_token = tl.load(root_tokens_ptr + request)
    draft_token = tl.load(draft_tokens_ptr + drafts_base + node - 1, mask=node > 0, other=0)
    seq_len = tl.load(seq_lens_ptr + request)
    tl.store(tokens_ptr + out_index, tl.where(node == 0, root_token, draft_token))
    tl.store(positions_ptr + out_index, seq_len + depth)
    tl.store(retrieve_index_ptr + out_index, out_index)

    is_draft = (lane >= 1) & in_tree
    first_child = tl.min(tl.where(is_draft & (parents == node), lane, BLOCK_NODES), axis=0)
    tl.store(next_token_ptr + out_index, tl.where(first_child == BLOCK_NODES, -1, first_child))
    my_parent = tl.sum(tl.where(lane == node, parents, 0), axis=0)
    sibling = tl.min(tl.where(is_draft & (parents == my_parent) & (lane > node), lane,
                              BLOCK_NODES), axis=0)
    no_sibling = (sibling == BLOCK_NODES) | (node == 0)
    tl.store(next_sibling_ptr + out_index, tl.where(no_sibling, -1, sibling))

    if MASK_MODE == 0:  # MASK_TREE_BLOCK
        tl.store(mask_ptr + out_index * num_nodes + lane, visible.to(tl.int8), mask=in_tree)
    elif MASK_MODE == 1:  # MASK_BIT_PACKED; distinct bits, so the sum is the OR
        one = tl.full([BLOCK_NODES], 1, tl.int64)
        bits = tl.where(visible & in_tree, one << lane, 0)
        tl.store(mask_ptr + out_index, tl.sum(bits, axis=0))
    else:  # MASK_FULL: [N, seq_len + N] per request, the prefix all visible
        row_start = tl.load(mask_block_start_ptr + request) + node * (seq_len + num_nodes)
        prefix_lane = tl.arange(0, BLOCK_PREFIX)
        for start in range(0, seq_len, BLOCK_PREFIX):
            column = start + prefix_lane
            tl.store(mask_ptr + row_start + column, tl.full([BLOCK_PREFIX], 1, tl.int8),
                     mask=column < seq_len)
        tl.store(mask_ptr + row_start + seq_len + lane, visible.to(tl.int8), mask=in_tree)


@triton.jit
def grow_tree_kernel(
    prev_scores_ptr,  # [B, K] float32 frontier scores
    prev_node_ids_ptr,  # [B, K] int64 frontier candidate ids
    probs_ptr,  # [B * K, K] the frontier branches' top-K probabilities (any float)
    ids_ptr,  # [B * K, K] int64 their tokens
    cand_scores_ptr,  # out [B, K * K] float32
    cand_tokens_ptr,  # out [B, K * K] int64
    cand_parents_ptr,  # out [B, K * K] int64
    scores_ptr,  # out [B, K] float32 the new frontier
    tokens_ptr,  # out [B, K] int64
    branches_ptr,  # out [B, K] int64
    node_ids_ptr,  # out [B, K] int64
    first_id,  # candidate id of this depth's first candidate
    TOPK: tl.constexpr,
    BLOCK: tl.constexpr,  # a power of two >= TOPK * TOPK
):
    request = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, BLOCK)
    valid = lane < TOPK * TOPK
    branch = lane // TOPK  # candidate k * K + j is child j of frontier branch k
    base = request * TOPK * TOPK
    parent_score = tl.load(prev_scores_ptr + request * TOPK + branch, mask=valid, other=0.0)
    prob = tl.load(probs_ptr + base + lane, mask=valid, other=0.0).to(tl.float32)
    score = parent_score * prob
    token = tl.load(ids_ptr + base + lane, mask=valid, other=0)
    parent = tl.load(prev_node_ids_ptr + request * TOPK + branch, mask=valid, other=0)
    tl.store(cand_scores_ptr + base + lane, score, mask=valid)
    tl.store(cand_tokens_ptr + base + lane, token, mask=valid)
    tl.store(cand_parents_ptr + base + lane, parent, mask=valid)
    # scores are products of probabilities (>= 0): -inf marks the lanes out of the running;
    # a NaN ranks first, as in the reference's descending sort
    remaining = tl.where(valid, tl.where(score != score, float("inf"), score), float("-inf"))
    for t in tl.static_range(TOPK):
        best = tl.max(remaining, axis=0)
        pick = tl.minimum(tl.min(tl.where(remaining == best, lane, BLOCK), axis=0),
                          TOPK * TOPK - 1)
        chosen = lane == pick
        out = request * TOPK + t
        tl.store(scores_ptr + out, tl.sum(tl.where(chosen, score, 0.0), axis=0))
        tl.store(tokens_ptr + out, tl.sum(tl.where(chosen, token, 0), axis=0))
        tl.store(branches_ptr + out, (pick // TOPK).to(tl.int64))
        tl.store(node_ids_ptr + out, pick.to(tl.int64) + first_id)
        remaining = tl.where(chosen, float("-inf"), remaining)


@triton.jit
def organize_tree_kernel(
    scores_ptr,  # [B, M] float32 every step's candidate scores, side by side
    tokens_ptr,  # [B, M] int64 their tokens
    parents_ptr,  # [B, M] int64 candidate id of each one's parent (0 = root)
    out_tokens_ptr,  # out [B, D] int64 the D selected drafts in candidate order
    out_parents_ptr,  # out [B, D] int64 verify node of each one's parent (0 = root)
    out_ids_ptr,  # out [B, D] int64 their candidate ids (index + 1)
    num_candidates,  # M
    num_drafts,  # D = N - 1 <= M
    BLOCK: tl.constexpr,  # a power of two >= M
):
    request = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, BLOCK)
    valid = lane < num_candidates
    base = request * num_candidates
    score = tl.load(scores_ptr + base + lane, mask=valid, other=0.0)
    score = tl.where(score != score, float("inf"), score)  # a NaN ranks first, as in the sort
    row = lane[:, None]  # candidate i
    col = lane[None, :]  # candidate j
    # j ranks before i: a higher score, or an equal one at a lower index (a stable sort)
    before = valid[None, :] & ((score[None, :] > score[:, None])
                               | ((score[None, :] == score[:, None]) & (col < row)))
    rank = tl.sum(before.to(tl.int32), axis=1)
    selected = valid & (rank < num_drafts)
    # the selected drafts in candidate order: column = selected candidates before it
    column = tl.sum((selected[None, :] & (col < row)).to(tl.int32), axis=1)
    parent = tl.load(parents_ptr + base + lane, mask=valid, other=0)
    # the parent's verify node is its column + 1 (the root, id 0, matches no candidate: 0)
    owner = selected[None, :] & (col.to(tl.int64) == parent[:, None] - 1)
    parent_node = tl.sum(tl.where(owner, column[None, :] + 1, 0), axis=1)
    token = tl.load(tokens_ptr + base + lane, mask=valid, other=0)
    out = request * num_drafts + column
    tl.store(out_tokens_ptr + out, token, mask=selected)
    tl.store(out_parents_ptr + out, parent_node.to(tl.int64), mask=selected)
    tl.store(out_ids_ptr + out, lane.to(tl.int64) + 1, mask=selected)
