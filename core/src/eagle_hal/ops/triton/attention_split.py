"""The host side of the split-K paged attention whose kernels are in
``attention_split_kernels`` (read its docstring for what they compute): how many splits a
launch takes (``choose_num_splits``), the scratch for the splits' partial results
(``SplitPartials``), and the launch of the attention kernel and the merge
(``split_paged_attention``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import triton

from eagle_hal import settings
from eagle_hal.ops.triton.attention_split_kernels import (
    _merge_splits_kernel,
    _split_attention_kernel,
)

__all__ = [
    "BLOCK_KEYS",
    "SplitPartials",
    "choose_num_splits",
    "split_paged_attention",
]

# Keys per inner iteration. The gathered [BLOCK_N, D] K and V tiles live in registers: at
# about 16 elements of each per thread (32 keys, 4 warps for D <= 64, 8 warps above) a
# program takes ~128 registers on sm_90 without spilling, so four fit on an SM at once.
BLOCK_KEYS = 32
_ELEMENTS_PER_WARP = 512  # of a K tile, per warp
_TARGET_PROGRAMS = 512  # programs worth launching for decode (a few per SM of a large GPU)
_MAX_SPLITS = 32
_MIN_ROWS = 16  # tl.dot needs at least 16 rows and 16 columns per operand
_LOG2E = math.log2(math.e)


class SplitPartials(NamedTuple):
    """Scratch for the per-split results of one launch (may be reused by the next one)."""

    out: torch.Tensor  # [T, H, num_splits, D] float32, each split's normalised output
    lse: torch.Tensor  # [T, H, num_splits] float32, each split's base-2 log-sum-exp


def choose_num_splits(
    num_tokens: int, num_kv_heads: int, max_context: int, block_keys: int = BLOCK_KEYS
) -> int:
    """Splits per (token, KV head) from static shapes only: enough programs to fill a large
    GPU when tokens are few (decode at small batch), one split when they already do (then
    no merge runs). Never more splits than ``block_keys`` blocks in ``max_context``. A
    power of two: the count is a compile-time constant of the kernel, and eager forwards
    of arbitrary lengths (prefills, catch-ups) must not compile a variant each (a compile
    takes about a second, inside whatever runs then)."""
    programs = max(1, num_tokens * num_kv_heads)
    wanted = -(-_TARGET_PROGRAMS // programs)
    blocks = max(1, -(-max_context // block_keys))
    splits = max(1, min(_MAX_SPLITS, wanted, blocks))
    return 1 << (splits.bit_length() - 1)  # rounded down to a power of two


def _dot_in_float32(
    q_dtype: torch.dtype, cache_dtype: torch.dtype, fp32_dot: bool = False
) -> bool:
    """Float32 dot operands unless ``q`` and the cache share a 16-bit dtype. Triton's
    interpreter holds bfloat16 as raw 16-bit integers and multiplies them as such in
    ``tl.dot``, so interpreted bfloat16 gets float32 operands too. ``fp32_dot`` forces
    float32 operands for 16-bit caches as well (slower; for measuring what 16-bit dot
    operands cost in accuracy)."""
    if q_dtype != cache_dtype or cache_dtype == torch.float32 or fp32_dot:
        return True
    return cache_dtype == torch.bfloat16 and settings.triton_interpreted()


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def split_paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_order: str,
    out_cache_loc: torch.Tensor,
    req_to_token: torch.Tensor,
    table_rows: torch.Tensor,
    prefix_lens: torch.Tensor,
    token_request: torch.Tensor,
    own_base: torch.Tensor,
    own_len: torch.Tensor,
    ancestor_slots: torch.Tensor | None,
    tree_mask: torch.Tensor | None,
    tree_width: int,
    scale: float,
    num_splits: int,
    partials: SplitPartials | None = None,
    block_keys: int = BLOCK_KEYS,
    fp32_dot: bool = False,
    *,
    window: int | None = None,
    positions: torch.Tensor | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Write ``k``/``v`` ``[T, H_kv, D]`` into ``k_cache``/``v_cache`` at ``out_cache_loc``
    and attend with ``q`` ``[T, H, D]``; returns ``[T, H, D]`` in ``q.dtype``.

    Key runs as the module docstring says: ``ancestor_slots`` (flat ``draft_kv_slots``) for
    DRAFT_DECODE, else ``None``; ``tree_mask`` (uint8 or bool, ``T * tree_width``
    elements) filters the own run when given. ``kv_order`` is ``"NHD"`` or ``"HND"``.
    ``partials`` is scratch for ``num_splits > 1`` (allocated when ``None``, ignored for
    one split);
    ``block_keys`` (a power of two, at least 16) is the key tile; ``fp32_dot`` gives 16-bit
    caches float32 dot operands too (``_dot_in_float32``). ``window`` (with ``positions``
    ``[T]``, each token's position) and ``softcap`` as the kernels' docstring says.
    Launches one kernel, plus the merge when ``num_splits > 1``; reads no device value on
    the host. Raises ``ValueError`` for inconsistent shapes."""
    num_tokens, num_heads, head_dim = q.shape
    if k.shape != v.shape or k.shape[0] != num_tokens or k.shape[2] != head_dim:
        raise ValueError(
            f"k {tuple(k.shape)} and v {tuple(v.shape)} must both be [T, H_kv, D] for q "
            f"{tuple(q.shape)}"
        )
    num_kv_heads = k.shape[1]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads are not a multiple of {num_kv_heads} KV heads")
    if num_splits < 1 or block_keys < _MIN_ROWS or block_keys & (block_keys - 1):
        raise ValueError(
            f"need num_splits >= 1 and a power-of-two block_keys >= 16, got {num_splits}, "
            f"{block_keys}"
        )
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if num_tokens == 0:
        return out
    if kv_order == "NHD":
        stride_slot, stride_head = k_cache.stride(0), k_cache.stride(1)
    else:
        stride_slot, stride_head = k_cache.stride(1), k_cache.stride(0)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    if num_splits == 1:
        partial_out = partial_lse = out  # unused: a single split writes the output itself
    else:
        if partials is None:
            partials = SplitPartials(
                torch.empty(num_tokens, num_heads, num_splits, head_dim, dtype=torch.float32,
                            device=q.device),
                torch.empty(num_tokens, num_heads, num_splits, dtype=torch.float32,
                            device=q.device),
            )
        partial_out, partial_lse = partials
        if tuple(partial_out.shape) != (num_tokens, num_heads, num_splits, head_dim):
            raise ValueError(
                f"partials {tuple(partial_out.shape)} do not fit {num_splits} splits of "
                f"q {tuple(q.shape)}"
            )
    group = num_heads // num_kv_heads
    block_dim = max(_MIN_ROWS, triton.next_power_of_2(head_dim))
    slots_arg = ancestor_slots if ancestor_slots is not None else out_cache_loc
    mask_arg = tree_mask.view(torch.uint8) if tree_mask is not None else out_cache_loc
    if window is not None and (positions is None or window < 1):
        raise ValueError(f"a window ({window}) needs positions and must be >= 1")
    positions_arg = positions if window is not None else out_cache_loc
    cap_in = scale / softcap if softcap is not None else 0.0
    cap_out = softcap * _LOG2E if softcap is not None else 0.0
    _split_attention_kernel[(num_tokens, num_kv_heads, num_splits)](
        q, k, v, k_cache, v_cache, out, partial_out, partial_lse,
        req_to_token, table_rows, prefix_lens, out_cache_loc,
        token_request, own_base, own_len, slots_arg, mask_arg, positions_arg,
        scale * _LOG2E, cap_in, cap_out, window or 0, tree_width,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), stride_slot, stride_head, req_to_token.stride(0),
        NUM_HEADS=num_heads,
        GROUP=group,
        HEAD_DIM=head_dim,
        BLOCK_M=max(_MIN_ROWS, triton.next_power_of_2(group)),
        BLOCK_D=block_dim,
        BLOCK_N=block_keys,
        NUM_SPLITS=num_splits,
        HAS_ANCESTORS=ancestor_slots is not None,
        HAS_TREE_MASK=tree_mask is not None,
        HAS_WINDOW=window is not None,
        HAS_SOFTCAP=softcap is not None,
        DOT_FP32=_dot_in_float32(q.dtype, k_cache.dtype, fp32_dot),
        num_warps=max(4, min(8, block_keys * block_dim // _ELEMENTS_PER_WARP)),
    )
    if num_splits > 1:
        _merge_splits_kernel[(num_tokens, num_heads)](
            partial_out, partial_lse, out, out.stride(0), out.stride(1),
            NUM_HEADS=num_heads,
            HEAD_DIM=head_dim,
            BLOCK_D=triton.next_power_of_2(head_dim),
            NUM_SPLITS=num_splits,
            BLOCK_SPLITS=triton.next_power_of_2(num_splits),
            num_warps=1 if head_dim <= 64 else 2,
        )
    return out
