"""Triton paged attention split over the keys: one program per (query token, KV head, split).

A program takes one query token and one KV head and attends with every query head of that
head's GQA group at once: a ``[BLOCK_M, D]`` query tile (the group's heads, padded to at
least 16 rows for ``tl.dot``) against ``[BLOCK_N, D]`` key tiles, so each key is read once
per group rather than once per query head. The token's keys are a virtual sequence of
``prefix_len + own_len`` positions:

* ``[0, prefix_len)``: its request's cached prefix, slots ``req_to_token[row, position]``;
* then its own run of ``own_len`` keys, which this very forward writes. Without
  ``ancestor_slots`` (EXTEND, DECODE, DRAFT_EXTEND, TARGET_VERIFY) own key ``j`` is the new
  token ``own_base + j`` (causal modes plan ``own_len`` up to the token itself; verify reads
  all N tree tokens, filtered by the tree-mask row). With ``ancestor_slots`` (DRAFT_DECODE)
  own keys ``j < own_len - 1`` are the branch's cached ancestors, slots
  ``ancestor_slots[own_base + j]``, and the last one is the token itself.

Sliding window (``HAS_WINDOW``): the token's position is ``positions[token]``; it sees the
keys at positions ``> position - window``. Prefix key ``c`` is at position ``c``, so the
virtual sequence starts at the first prefix column inside the window and the prefix needs
no mask; an own key is at ``positions[input]`` (new tokens, tree nodes) or, for a draft
ancestor, the token's position minus its distance, and is masked by it. Soft-capping
(``HAS_SOFTCAP``): each score ``s`` becomes ``cap * tanh(s / cap)`` before the softmax.

The new tokens' K/V are read straight from the ``k``/``v`` inputs (rounded to the cache
dtype, as the store would) and written to the cache at ``out_cache_loc`` by the split-0
program of each (token, KV head): the KV write costs no launch of its own, and no program
reads a slot that this launch writes.

Split-K: the virtual sequence is cut into ``num_splits`` chunks of whole ``BLOCK_N`` blocks,
sized from the token's loaded lengths; ``num_splits`` is a launch constant chosen from
static shapes only (``attention_split.choose_num_splits``), so the grid never depends on
data and the launch can be captured into a device graph whose replays see new lengths. A
split that gets no key (short contexts) or only masked keys leaves a log-sum-exp of
``-inf``. With one split the kernel writes the output itself; otherwise each split writes
its normalised partial output and base-2 log-sum-exp, and ``_merge_splits_kernel`` (one
program per token and query head) combines them. Softmax is online in float32 with
``exp2`` (the scale folded with ``log2 e``). Half-precision inputs use half-precision dot
operands with float32 accumulation (the probabilities are rounded to the value dtype for
the second product, as flash attention does); float32 inputs use IEEE float32 dots.

The host side (the split count, the partials' scratch, the launch) is in
``attention_split``. The kernel this one replaces (one program per token and query head,
no split, K/V written beforehand) lives with its benchmark,
``benchmarks/paged_attention_baseline.py``; ``benchmarks/bench_attention.py`` times both.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__: list[str] = []  # the kernels are launched by ``attention_split.split_paged_attention``

_NEG_LARGE = tl.constexpr(-1.0e30)  # finite start of the running maximum


@triton.jit
def _attend_block(
    query,  # [BLOCK_M, BLOCK_D] in the dot dtype
    keys,  # [BLOCK_N, BLOCK_D] in the dot dtype
    values,  # [BLOCK_N, BLOCK_D] in the dot dtype
    visible,  # [BLOCK_N] bool
    running_max,  # [BLOCK_M] float32, base 2
    running_sum,  # [BLOCK_M] float32
    acc,  # [BLOCK_M, BLOCK_D] float32
    qk_scale,  # softmax scale * log2(e)
    cap_in,  # softmax scale / cap (HAS_SOFTCAP)
    cap_out,  # cap * log2(e) (HAS_SOFTCAP)
    DOT_FP32: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
):
    if DOT_FP32:
        scores = tl.dot(query, tl.trans(keys), input_precision="ieee")
    else:
        scores = tl.dot(query, tl.trans(keys))
    if HAS_SOFTCAP:
        # tanh(x) = 1 - 2 / (exp(2x) + 1): exact at both tails (exp overflows to inf or 0)
        capped = 1.0 - 2.0 / (tl.exp(2.0 * scores * cap_in) + 1.0)
        scores = capped * cap_out
    else:
        scores = scores * qk_scale
    scores = tl.where(visible[None, :], scores, float("-inf"))  # [BLOCK_M, BLOCK_N]
    new_max = tl.maximum(running_max, tl.max(scores, axis=1))
    weights = tl.exp2(scores - new_max[:, None])  # 0 where masked: new_max is finite
    correction = tl.exp2(running_max - new_max)
    running_sum = running_sum * correction + tl.sum(weights, axis=1)
    if DOT_FP32:
        update = tl.dot(weights, values, input_precision="ieee")
    else:
        update = tl.dot(weights.to(values.dtype), values)
    acc = acc * correction[:, None] + update
    return new_max, running_sum, acc


@triton.jit
def _split_attention_kernel(
    q_ptr,  # [T, H, D], strides (stride_q_token, stride_q_head, 1)
    k_ptr,  # [T, H_kv, D] this forward's keys, strides (stride_k_token, stride_k_head, 1)
    v_ptr,  # [T, H_kv, D] this forward's values, strides (stride_v_token, stride_v_head, 1)
    k_cache_ptr,  # one layer's keys, NHD [slots, H_kv, D] or HND [H_kv, slots, D]
    v_cache_ptr,  # same layout as keys
    out_ptr,  # [T, H, D] (NUM_SPLITS == 1)
    partial_out_ptr,  # [T, H, NUM_SPLITS, D] float32 (NUM_SPLITS > 1)
    partial_lse_ptr,  # [T, H, NUM_SPLITS] float32 (NUM_SPLITS > 1)
    req_to_token_ptr,  # [max_requests, max_context]
    table_rows_ptr,  # [B] table row of each request
    prefix_lens_ptr,  # [B]
    out_cache_loc_ptr,  # [T] where each new token's K/V goes
    token_request_ptr,  # [T] int32 request of each token
    own_base_ptr,  # [T] int32
    own_len_ptr,  # [T] int32
    ancestor_slots_ptr,  # flat draft_kv_slots (HAS_ANCESTORS)
    tree_mask_ptr,  # uint8 [T, tree_width] (HAS_TREE_MASK)
    positions_ptr,  # [T] position of each token (HAS_WINDOW)
    qk_scale,
    cap_in,
    cap_out,
    window,
    tree_width,
    stride_q_token,
    stride_q_head,
    stride_k_token,
    stride_k_head,
    stride_v_token,
    stride_v_head,
    stride_out_token,
    stride_out_head,
    stride_kv_slot,
    stride_kv_head,
    stride_table_row,
    NUM_HEADS: tl.constexpr,
    GROUP: tl.constexpr,  # query heads per KV head
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    HAS_ANCESTORS: tl.constexpr,
    HAS_TREE_MASK: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM
    lanes = tl.arange(0, BLOCK_N)
    group_rows = tl.arange(0, BLOCK_M)
    row_ok = group_rows < GROUP
    heads = kv_head * GROUP + group_rows  # [BLOCK_M]
    cache_dtype = k_cache_ptr.dtype.element_ty
    kv_head_offset = kv_head * stride_kv_head

    request = tl.load(token_request_ptr + token).to(tl.int64)
    row = tl.load(table_rows_ptr + request).to(tl.int64)
    prefix_len = tl.load(prefix_lens_ptr + request).to(tl.int32)
    own_base = tl.load(own_base_ptr + token).to(tl.int64)
    own_len = tl.load(own_len_ptr + token).to(tl.int32)

    if split == 0:  # the KV write, once per (token, KV head)
        slot = tl.load(out_cache_loc_ptr + token).to(tl.int64)
        new_key = tl.load(k_ptr + token * stride_k_token + kv_head * stride_k_head + dims,
                          mask=dim_ok)
        new_value = tl.load(v_ptr + token * stride_v_token + kv_head * stride_v_head + dims,
                            mask=dim_ok)
        cache_offset = slot * stride_kv_slot + kv_head_offset + dims
        tl.store(k_cache_ptr + cache_offset, new_key.to(cache_dtype), mask=dim_ok)
        tl.store(v_cache_ptr + cache_offset, new_value.to(v_cache_ptr.dtype.element_ty),
                 mask=dim_ok)

    # This split's chunk of the virtual key sequence, in whole blocks; a window starts the
    # sequence at its first visible prefix column.
    total = prefix_len + own_len
    if HAS_WINDOW:
        query_pos = tl.load(positions_ptr + token).to(tl.int32)
        first_pos = query_pos - window + 1  # the first position inside the window
        seq_lo = tl.minimum(tl.maximum(first_pos, 0), prefix_len)
    else:
        query_pos = 0
        first_pos = 0
        seq_lo = 0
    chunk = tl.cdiv(tl.cdiv(total - seq_lo, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = seq_lo + split * chunk
    hi = tl.minimum(lo + chunk, total)

    both_ok = row_ok[:, None] & dim_ok[None, :]
    query = tl.load(q_ptr + token * stride_q_token + heads[:, None] * stride_q_head
                    + dims[None, :], mask=both_ok, other=0.0)
    if DOT_FP32:
        query = query.to(tl.float32)
    else:
        query = query.to(cache_dtype)
    running_max = tl.zeros([BLOCK_M], dtype=tl.float32) + _NEG_LARGE
    running_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # The cached prefix: every slot visible.
    prefix_hi = tl.minimum(hi, prefix_len)
    for start in range(lo, prefix_hi, BLOCK_N):
        cols = start + lanes
        valid = cols < prefix_hi
        slots = tl.load(req_to_token_ptr + row * stride_table_row + cols, mask=valid,
                        other=0).to(tl.int64)
        offsets = slots[:, None] * stride_kv_slot + kv_head_offset + dims[None, :]
        kv_ok = valid[:, None] & dim_ok[None, :]
        keys = tl.load(k_cache_ptr + offsets, mask=kv_ok, other=0.0)
        values = tl.load(v_cache_ptr + offsets, mask=kv_ok, other=0.0)
        if DOT_FP32:
            keys = keys.to(tl.float32)
            values = values.to(tl.float32)
        running_max, running_sum, acc = _attend_block(
            query, keys, values, valid, running_max, running_sum, acc, qk_scale, cap_in,
            cap_out, DOT_FP32, HAS_SOFTCAP)

    # The own run: new tokens from the inputs, draft ancestors from the cache.
    if HAS_ANCESTORS:
        first_new = own_len - 1  # ancestors, then the token itself
        input_base = token - first_new
    else:
        first_new = 0
        input_base = own_base
    own_lo = tl.maximum(lo, prefix_len) - prefix_len
    own_hi = hi - prefix_len
    for start in range(own_lo, own_hi, BLOCK_N):
        cols = start + lanes
        valid = cols < own_hi
        if HAS_TREE_MASK:
            seen = tl.load(tree_mask_ptr + token * tree_width + cols, mask=valid, other=0)
            valid = valid & (seen != 0)
        if HAS_WINDOW:
            if HAS_ANCESTORS:
                key_pos = query_pos - (own_len - 1 - cols)
            else:
                key_pos = tl.load(positions_ptr + input_base + cols, mask=valid,
                                  other=0).to(tl.int32)
            valid = valid & (key_pos >= first_pos)
        new = valid & (cols >= first_new)
        inputs = (input_base + cols).to(tl.int64)
        new_ok = new[:, None] & dim_ok[None, :]
        keys = tl.load(k_ptr + inputs[:, None] * stride_k_token + kv_head * stride_k_head
                       + dims[None, :], mask=new_ok, other=0.0).to(cache_dtype)
        values = tl.load(v_ptr + inputs[:, None] * stride_v_token + kv_head * stride_v_head
                         + dims[None, :], mask=new_ok, other=0.0).to(v_cache_ptr.dtype.element_ty)
        if HAS_ANCESTORS:
            cached = valid & (cols < first_new)
            slots = tl.load(ancestor_slots_ptr + own_base + cols, mask=cached,
                            other=0).to(tl.int64)
            offsets = slots[:, None] * stride_kv_slot + kv_head_offset + dims[None, :]
            cached_ok = cached[:, None] & dim_ok[None, :]
            keys = tl.where(cached_ok, tl.load(k_cache_ptr + offsets, mask=cached_ok, other=0.0),
                            keys)
            values = tl.where(cached_ok,
                              tl.load(v_cache_ptr + offsets, mask=cached_ok, other=0.0), values)
        if DOT_FP32:
            keys = keys.to(tl.float32)
            values = values.to(tl.float32)
        running_max, running_sum, acc = _attend_block(
            query, keys, values, valid, running_max, running_sum, acc, qk_scale, cap_in,
            cap_out, DOT_FP32, HAS_SOFTCAP)

    if NUM_SPLITS == 1:
        # Every query sees at least itself, so running_sum > 0 on real rows (a padding
        # token's window may leave it none: 0, not NaN)
        out = acc / tl.where(running_sum > 0.0, running_sum, 1.0)[:, None]
        tl.store(out_ptr + token * stride_out_token + heads[:, None] * stride_out_head
                 + dims[None, :], out.to(out_ptr.dtype.element_ty), mask=both_ok)
    else:
        seen_any = running_sum > 0.0
        safe_sum = tl.where(seen_any, running_sum, 1.0)
        lse = tl.where(seen_any, running_max + tl.log2(safe_sum), float("-inf"))
        out = acc / safe_sum[:, None]
        partial = (token * NUM_HEADS + heads) * NUM_SPLITS + split  # [BLOCK_M]
        tl.store(partial_lse_ptr + partial, lse, mask=row_ok)
        tl.store(partial_out_ptr + partial[:, None] * HEAD_DIM + dims[None, :], out,
                 mask=both_ok & seen_any[:, None])  # the merge reads only splits with keys


@triton.jit
def _merge_splits_kernel(
    partial_out_ptr,  # [T, H, NUM_SPLITS, D] float32
    partial_lse_ptr,  # [T, H, NUM_SPLITS] float32, base 2
    out_ptr,  # [T, H, D]
    stride_out_token,
    stride_out_head,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_SPLITS: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    dims = tl.arange(0, BLOCK_D)
    splits = tl.arange(0, BLOCK_SPLITS)
    base = (token * NUM_HEADS + head) * NUM_SPLITS
    lse = tl.load(partial_lse_ptr + base + splits, mask=splits < NUM_SPLITS,
                  other=float("-inf"))
    top = tl.max(lse, axis=0)  # finite: some split saw the token itself
    has_keys = lse > float("-inf")
    weights = tl.where(has_keys, tl.exp2(lse - top), 0.0)  # [BLOCK_SPLITS]
    # a split without keys has nothing to add: its output is not read
    parts = tl.load(partial_out_ptr + (base + splits)[:, None] * HEAD_DIM + dims[None, :],
                    mask=has_keys[:, None] & (dims < HEAD_DIM)[None, :], other=0.0)
    out = tl.sum(weights[:, None] * parts, axis=0) / tl.sum(weights, axis=0)
    tl.store(out_ptr + token * stride_out_token + head * stride_out_head + dims,
             out.to(out_ptr.dtype.element_ty), mask=dims < HEAD_DIM)
