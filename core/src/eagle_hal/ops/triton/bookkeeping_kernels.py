"""Triton kernels for the bookkeeping around acceptance and the split-vocabulary argmax.

All blocks are powers of two with masked tails; none assumes a warp size.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = [
    "argmax_partial_kernel",
    "argmax_reduce_kernel",
    "assign_verify_slots_kernel",
    "draft_kv_slots_kernel",
    "fill_bonus_kernel",
]


@triton.jit
def fill_bonus_kernel(
    tokens_ptr,  # [B, N] int64
    accepted_ptr,  # [B, W] int64
    accept_lens_ptr,  # [B] int64
    bonus_ptr,  # [B] int64
    out_ptr,  # out [B, W] int64
    num_nodes,
    width,
    BLOCK_WIDTH: tl.constexpr,
):
    request = tl.program_id(0).to(tl.int64)
    column = tl.arange(0, BLOCK_WIDTH)
    length = tl.load(accept_lens_ptr + request)
    is_draft = (column + 1 < length) & (column + 1 < width)  # column j emits path entry j + 1
    node = tl.load(accepted_ptr + request * width + column + 1, mask=is_draft, other=0)
    draft = tl.load(tokens_ptr + request * num_nodes + node, mask=is_draft, other=-1)
    out = tl.where(column == length - 1, tl.load(bonus_ptr + request), draft)
    tl.store(out_ptr + request * width + column, out, mask=column < width)


@triton.jit
def assign_verify_slots_kernel(
    req_to_token_ptr,  # [R, C] table, written in place
    req_to_token_stride,
    table_rows_ptr,  # [B]
    seq_lens_ptr,  # [B]
    out_cache_loc_ptr,  # [B * N]
    num_nodes,
    BLOCK: tl.constexpr,
):
    request = tl.program_id(0).to(tl.int64)
    row = tl.load(table_rows_ptr + request).to(tl.int64)
    start = tl.load(seq_lens_ptr + request).to(tl.int64)
    lane = tl.arange(0, BLOCK)
    for offset in range(0, num_nodes, BLOCK):
        column = offset + lane
        in_block = column < num_nodes
        slots = tl.load(out_cache_loc_ptr + request * num_nodes + column, mask=in_block)
        target = req_to_token_ptr + row * req_to_token_stride + start + column
        tl.store(target, slots.to(req_to_token_ptr.dtype.element_ty), mask=in_block)


@triton.jit
def draft_kv_slots_kernel(
    scratch_ptr,  # [B, S, K] slot of the draft token at depth d + 1, branch k
    parents_ptr,  # [step + 1, B, K] int64 parent branch per depth (entry 0 unused)
    out_ptr,  # out [B * K, step + 1]
    batch_size,
    topk,
    num_steps,
    step,
):
    row = tl.program_id(0).to(tl.int64)
    request = row // topk
    branch = row % topk
    out_row = out_ptr + row * (step + 1)
    tl.store(out_row + step, tl.load(scratch_ptr + (request * num_steps + step) * topk + branch))
    for hop in range(0, step):  # walk up from depth step + 1 to depth 1
        depth_index = step - hop
        branch = tl.load(parents_ptr + (depth_index * batch_size + request) * topk + branch)
        slot = tl.load(scratch_ptr + (request * num_steps + depth_index - 1) * topk + branch)
        tl.store(out_row + depth_index - 1, slot)


@triton.jit
def argmax_partial_kernel(
    logits_ptr,  # [R, V_padded] (last dim contiguous)
    row_stride,
    vocab,
    part_values_ptr,  # out [R, P] float32
    part_indices_ptr,  # out [R, P] int64
    num_parts,
    CHUNK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1).to(tl.int64)
    chunk_start = part * CHUNK
    lane = tl.arange(0, BLOCK)
    best_value = tl.full([], float("-inf"), tl.float32)
    best_index = chunk_start
    for offset in range(0, CHUNK, BLOCK):
        column = chunk_start + offset + lane
        x = tl.load(logits_ptr + row * row_stride + column, mask=column < vocab,
                    other=float("-inf")).to(tl.float32)
        block_best = tl.max(x, axis=0)
        block_index = tl.argmax(x, axis=0)  # first maximum of the block
        better = block_best > best_value  # strict: the earliest maximum wins
        best_index = tl.where(better, chunk_start + offset + block_index.to(tl.int64), best_index)
        best_value = tl.where(better, block_best, best_value)
    tl.store(part_values_ptr + row * num_parts + part, best_value)
    tl.store(part_indices_ptr + row * num_parts + part, best_index)


@triton.jit
def argmax_reduce_kernel(
    part_values_ptr,  # [R, P] float32
    part_indices_ptr,  # [R, P] int64
    out_ptr,  # out [R] int64
    num_parts,
    BLOCK_PARTS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    lane = tl.arange(0, BLOCK_PARTS)
    in_row = lane < num_parts
    values = tl.load(part_values_ptr + row * num_parts + lane, mask=in_row, other=float("-inf"))
    indices = tl.load(part_indices_ptr + row * num_parts + lane, mask=in_row, other=0)
    best = tl.max(values, axis=0)
    # Parts cover increasing ranges, so the smallest index among the best is the first one.
    first = tl.min(tl.where(in_row & (values == best), indices, 9223372036854775807), axis=0)
    tl.store(out_ptr + row, first)
