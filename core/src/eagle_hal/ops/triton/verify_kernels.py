"""Triton kernels for acceptance: greedy tree verification and tree speculative sampling.

One program per request walks the tree along ``retrieve_next_token`` /
``retrieve_next_sibling``. Sampling decisions use the contract's integer arithmetic
(``floor(p * 2**31)`` masses, draws scaled into a range as ``((draw >> 31) * R) >> 31``,
a coin ``scaled < mass``, an inverse-CDF bonus draw),
so the results equal the reference bit for bit. Vocabulary loops run in power-of-two
blocks with masked tails; no warp size is assumed.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["tree_sampling_kernel", "verify_greedy_kernel"]

PROB_SCALE = tl.constexpr(2147483648.0)  # 2**ACCEPT_PROB_BITS (31), exact in float32


@triton.jit
def verify_greedy_kernel(
    tokens_ptr,  # [B, N] int64
    next_token_ptr,  # [B, N] int64
    next_sibling_ptr,  # [B, N] int64
    predict_ptr,  # [B, N] int64 target argmax at each node
    accepted_ptr,  # out [B, W] int64
    accept_lens_ptr,  # out [B] int64
    bonus_ptr,  # out [B] int64
    num_nodes,
    width,
):
    request = tl.program_id(0).to(tl.int64)
    base = request * num_nodes
    current = request * 0
    count = current + 1
    alive = current + 1
    tl.store(accepted_ptr + request * width, current)
    for depth in range(1, width):
        target = tl.load(predict_ptr + base + current)
        child = tl.load(next_token_ptr + base + current)
        child = tl.where(alive != 0, child, -1)
        found = child * 0 - 1
        while child >= 0:  # siblings in order; stop at the first whose token matches
            hit = tl.load(tokens_ptr + base + child) == target
            found = tl.where(hit, child, found)
            child = tl.where(hit, -1, tl.load(next_sibling_ptr + base + child))
        tl.store(accepted_ptr + request * width + depth, found)  # -1 is NO_NODE
        accepted = found >= 0
        current = tl.where(accepted, found, current)
        count += accepted.to(tl.int64)
        alive = tl.where(accepted, alive, 0)
    tl.store(accept_lens_ptr + request, count)
    tl.store(bonus_ptr + request, tl.load(predict_ptr + base + current))


@triton.jit
def tree_sampling_kernel(
    tokens_ptr,  # [B, N] int64
    next_token_ptr,  # [B, N] int64
    next_sibling_ptr,  # [B, N] int64
    probs_ptr,  # [B, N, V] target probabilities (last dim contiguous)
    draws_ptr,  # [B, N] int64 accept draws
    bonus_draws_ptr,  # [B] int64 bonus draws
    accepted_ptr,  # out [B, W] int64
    accept_lens_ptr,  # out [B] int64
    bonus_ptr,  # out [B] int64
    num_nodes,
    vocab,
    width,
    probs_request_stride,
    probs_node_stride,
    BLOCK_VOCAB: tl.constexpr,
):
    request = tl.program_id(0).to(tl.int64)
    base = request * num_nodes
    lane = tl.arange(0, BLOCK_VOCAB)
    current = request * 0
    count = current + 1
    alive = current + 1
    tl.store(accepted_ptr + request * width, current)
    for depth in range(1, width):
        row = probs_ptr + request * probs_request_stride + current * probs_node_stride
        first = tl.load(next_token_ptr + base + current)
        first = tl.where(alive != 0, first, -1)
        total = current * 0  # integer mass of the node's whole distribution
        if first >= 0:
            for start in range(0, vocab, BLOCK_VOCAB):
                column = start + lane
                p = tl.load(row + column, mask=column < vocab, other=0.0).to(tl.float32)
                total += tl.sum((p * PROB_SCALE).to(tl.int64), axis=0)
        rejected = current * 0
        found = current * 0 - 1
        child = first
        while child >= 0:
            token = tl.load(tokens_ptr + base + child)
            mass = (tl.load(row + token).to(tl.float32) * PROB_SCALE).to(tl.int64)
            earlier = first
            while earlier != child:  # an earlier sibling with this token left it no mass
                same = tl.load(tokens_ptr + base + earlier) == token
                mass = tl.where(same, 0, mass)
                earlier = tl.load(next_sibling_ptr + base + earlier)
            remaining = tl.maximum(total - rejected, 1)
            draw = tl.load(draws_ptr + base + child)
            # Accept with probability mass / remaining: a uniform integer below it.
            hit = (mass > 0) & ((((draw >> 31) * remaining) >> 31) < mass)
            found = tl.where(hit, child, found)
            rejected += mass
            child = tl.where(hit, -1, tl.load(next_sibling_ptr + base + child))
        tl.store(accepted_ptr + request * width + depth, found)
        accepted = found >= 0
        current = tl.where(accepted, found, current)
        count += accepted.to(tl.int64)
        alive = tl.where(accepted, alive, 0)
    tl.store(accept_lens_ptr + request, count)

    # Bonus: an inverse-CDF draw from the integer masses of the last node's residual, whose
    # children's tokens are removed when the walk ended by rejecting them all. Two passes:
    # the residual's total mass, then the first token whose running mass passes the draw.
    row = probs_ptr + request * probs_request_stride + current * probs_node_stride
    first = tl.load(next_token_ptr + base + current)
    first = tl.where(alive == 0, first, -1)
    residual_total = current * 0
    for start in range(0, vocab, BLOCK_VOCAB):
        mass = _residual_masses(row, tokens_ptr + base, next_sibling_ptr + base, first, start,
                                lane, vocab, BLOCK_VOCAB)
        residual_total += tl.sum(mass, axis=0)
    target = ((tl.load(bonus_draws_ptr + request) >> 31) * tl.maximum(residual_total, 1)) >> 31
    running = current * 0
    bonus = current * 0  # a residual without mass (invalid input) gives token 0
    found = current * 0
    for start in range(0, vocab, BLOCK_VOCAB):
        mass = _residual_masses(row, tokens_ptr + base, next_sibling_ptr + base, first, start,
                                lane, vocab, BLOCK_VOCAB)
        passed = (tl.cumsum(mass, axis=0) + running > target) & (start + lane < vocab)
        block_first = tl.min(tl.where(passed, lane, BLOCK_VOCAB), axis=0)
        take = (found == 0) & (block_first < BLOCK_VOCAB) & (residual_total > 0)
        bonus = tl.where(take, start + block_first.to(tl.int64), bonus)
        found = tl.where(take, 1, found)
        running += tl.sum(mass, axis=0)
    tl.store(bonus_ptr + request, bonus)


@triton.jit
def _residual_masses(row, node_tokens_ptr, node_next_sibling_ptr, first_removed, start, lane,
                     vocab, BLOCK_VOCAB: tl.constexpr):
    """Integer masses of one vocabulary block, zero at the tokens of the sibling list that
    starts at ``first_removed`` (none when it is -1)."""
    column = start + lane
    p = tl.load(row + column, mask=column < vocab, other=0.0).to(tl.float32)
    mass = (p * PROB_SCALE).to(tl.int64)
    child = first_removed
    while child >= 0:
        mass = tl.where(column == tl.load(node_tokens_ptr + child), 0, mass)
        child = tl.load(node_next_sibling_ptr + child)
    return mass
