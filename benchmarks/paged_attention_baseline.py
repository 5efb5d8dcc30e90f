"""The baseline of ``bench_attention.py``: a Triton kernel for paged attention in every
forward mode, one query token per program.

``TritonAttentionBackend`` runs ``eagle_hal.ops.triton.attention_split_kernels`` (query
heads of a GQA group together, split over the keys, KV write fused); this kernel is what
the benchmark's "old" column times it against, so it lives with the benchmark. It expects
the forward's K/V already written to the cache.

One program per (query token, query head). A query token reads two runs of keys:

* its request's cached prefix: slots ``req_to_token[row, 0 : prefix_len]``, all visible;
* its own run: ``own_len`` slots read from ``own_slots[own_base : own_base + own_len]``,
  optionally filtered by a tree-mask row (``tree_mask[token * tree_width + j]``).

The forward modes differ only in the ``own`` run, which the planner describes per token:
causal modes read the request's ``out_cache_loc`` up to the token itself, TARGET_VERIFY reads
all N tree slots under the tree block, DRAFT_DECODE reads the branch's ``draft_kv_slots`` row.

Everything a program needs beyond its own token comes from device tensors (prefix lengths,
table rows), and loop bounds are loaded values, so a launch queues no host sync and the
kernel can be captured into a device graph whose replay sees refreshed lengths. Softmax is
online in float32 (the running maximum starts finite so fully masked blocks add nothing);
the K/V storage order (NHD or HND) is expressed by strides. Written for any Triton target.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["paged_attention", "paged_attention_kernel"]

_BLOCK_KEYS = 64  # keys per inner iteration
_NEG_LARGE = tl.constexpr(-1.0e30)  # finite start of the running maximum


@triton.jit
def paged_attention_kernel(
    q_ptr,  # [T, H, D]
    k_cache_ptr,  # one layer's keys, NHD [slots, H_kv, D] or HND [H_kv, slots, D]
    v_cache_ptr,  # same layout as keys
    out_ptr,  # [T, H, D]
    req_to_token_ptr,  # [max_requests, max_context]
    table_rows_ptr,  # [B] table row of each request
    prefix_lens_ptr,  # [B]
    token_request_ptr,  # [T] int32 request of each token
    own_base_ptr,  # [T] int32 first own-slot index of each token
    own_len_ptr,  # [T] int32 number of own slots of each token
    own_slots_ptr,  # flat slots of the own runs (out_cache_loc or draft_kv_slots)
    tree_mask_ptr,  # uint8 [T, tree_width] when HAS_TREE_MASK
    scale,
    tree_width,
    stride_q_token,
    stride_q_head,
    stride_out_token,
    stride_out_head,
    stride_kv_slot,
    stride_kv_head,
    stride_table_row,
    HEADS_PER_KV: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_DIM: tl.constexpr,
    BLOCK_KEYS: tl.constexpr,
    HAS_TREE_MASK: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    kv_head = head // HEADS_PER_KV
    dims = tl.arange(0, BLOCK_DIM)
    dim_ok = dims < HEAD_DIM
    lanes = tl.arange(0, BLOCK_KEYS)

    query = tl.load(q_ptr + token * stride_q_token + head * stride_q_head + dims, mask=dim_ok,
                    other=0.0).to(tl.float32) * scale  # [BLOCK_DIM]
    request = tl.load(token_request_ptr + token).to(tl.int64)
    row = tl.load(table_rows_ptr + request).to(tl.int64)
    prefix_len = tl.load(prefix_lens_ptr + request).to(tl.int32)
    own_base = tl.load(own_base_ptr + token).to(tl.int64)
    own_len = tl.load(own_len_ptr + token).to(tl.int32)
    kv_head_offset = kv_head * stride_kv_head

    running_max = tl.zeros([1], dtype=tl.float32) + _NEG_LARGE
    running_sum = tl.zeros([1], dtype=tl.float32)
    acc = tl.zeros([BLOCK_DIM], dtype=tl.float32)

    # The cached prefix: every slot visible.
    for start in range(0, prefix_len, BLOCK_KEYS):
        cols = start + lanes
        valid = cols < prefix_len
        slots = tl.load(req_to_token_ptr + row * stride_table_row + cols, mask=valid,
                        other=0).to(tl.int64)
        offsets = slots[:, None] * stride_kv_slot + kv_head_offset + dims[None, :]
        both = valid[:, None] & dim_ok[None, :]
        keys = tl.load(k_cache_ptr + offsets, mask=both, other=0.0).to(tl.float32)
        scores = tl.sum(keys * query[None, :], axis=1)  # [BLOCK_KEYS]
        scores = tl.where(valid, scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=0))
        weights = tl.where(valid, tl.exp(scores - new_max), 0.0)
        correction = tl.exp(running_max - new_max)
        values = tl.load(v_cache_ptr + offsets, mask=both, other=0.0).to(tl.float32)
        acc = acc * correction + tl.sum(weights[:, None] * values, axis=0)
        running_sum = running_sum * correction + tl.sum(weights, axis=0)
        running_max = new_max

    # The token's own run: causal prefix of the request's new tokens, tree nodes under the
    # mask, or a draft branch's ancestors.
    for start in range(0, own_len, BLOCK_KEYS):
        cols = start + lanes
        valid = cols < own_len
        slots = tl.load(own_slots_ptr + own_base + cols, mask=valid, other=0).to(tl.int64)
        if HAS_TREE_MASK:
            seen = tl.load(tree_mask_ptr + token * tree_width + cols, mask=valid, other=0)
            valid = valid & (seen != 0)
        offsets = slots[:, None] * stride_kv_slot + kv_head_offset + dims[None, :]
        both = valid[:, None] & dim_ok[None, :]
        keys = tl.load(k_cache_ptr + offsets, mask=both, other=0.0).to(tl.float32)
        scores = tl.sum(keys * query[None, :], axis=1)
        scores = tl.where(valid, scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=0))
        weights = tl.where(valid, tl.exp(scores - new_max), 0.0)
        correction = tl.exp(running_max - new_max)
        values = tl.load(v_cache_ptr + offsets, mask=both, other=0.0).to(tl.float32)
        acc = acc * correction + tl.sum(weights[:, None] * values, axis=0)
        running_sum = running_sum * correction + tl.sum(weights, axis=0)
        running_max = new_max

    # Every query sees at least itself, so running_sum > 0.
    out = acc / running_sum
    tl.store(out_ptr + token * stride_out_token + head * stride_out_head + dims,
             out.to(out_ptr.dtype.element_ty), mask=dim_ok)


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_order: str,
    req_to_token: torch.Tensor,
    table_rows: torch.Tensor,
    prefix_lens: torch.Tensor,
    token_request: torch.Tensor,
    own_base: torch.Tensor,
    own_len: torch.Tensor,
    own_slots: torch.Tensor,
    tree_mask: torch.Tensor | None,
    tree_width: int,
    scale: float,
) -> torch.Tensor:
    """Attend with ``q`` ``[T, H, D]`` over one layer's paged K/V; returns ``[T, H, D]`` in
    ``q.dtype``. ``kv_order`` is ``"NHD"`` or ``"HND"``; ``tree_mask`` (uint8 or bool, ``T *
    tree_width`` elements, row-major per token) filters the own run when given. Launches one
    kernel; reads no device value on the host."""
    num_tokens, num_heads, head_dim = q.shape
    out = torch.empty_like(q)
    if num_tokens == 0:
        return out
    if kv_order == "NHD":
        num_kv_heads = k_cache.shape[1]
        stride_slot, stride_head = k_cache.stride(0), k_cache.stride(1)
    else:
        num_kv_heads = k_cache.shape[0]
        stride_slot, stride_head = k_cache.stride(1), k_cache.stride(0)
    mask = own_slots if tree_mask is None else tree_mask.view(torch.uint8)
    paged_attention_kernel[(num_tokens, num_heads)](
        q, k_cache, v_cache, out,
        req_to_token, table_rows, prefix_lens,
        token_request, own_base, own_len, own_slots, mask,
        scale, tree_width,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        stride_slot, stride_head, req_to_token.stride(0),
        HEADS_PER_KV=num_heads // num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_DIM=triton.next_power_of_2(head_dim),
        BLOCK_KEYS=_BLOCK_KEYS,
        HAS_TREE_MASK=tree_mask is not None,
    )
    return out
