"""EMULATION of mate's ``flash_attn_with_kvcache`` (paged form), written from mate's sources.
Not the real op.

Nothing here has run on Moore Threads hardware or been compared with mate. It implements in
plain torch the documented semantics of the subset eagle-hal's MUSA adapter uses, reads the
paged cache in mate's layout, checks the documented constraints of that subset, and raises
``NotImplementedError`` for anything outside it. Sources (MooreThreads/mate):

* signature and shapes: ``mate/mha_interface.py`` (``flash_attn_with_kvcache``): ``q``
  ``(total_q, nheads, headdim)`` with ``cu_seqlens_q`` ``(batch + 1)`` and ``max_seqlen_q``;
  paged ``k_cache`` / ``v_cache`` ``(num_blocks, page_block_size, nheads_k, headdim)`` with
  ``page_table`` ``(batch, max_num_blocks_per_seq)``; ``cache_seqlens`` ``(batch)`` (or an
  int); ``softmax_scale`` default ``headdim ** -0.5``; output ``(total_q, nheads,
  headdim_v)``; with ``return_softmax_lse`` also the log-sum-exp ``(nheads, total_q)``;
  contiguous last dimension of the caches (asserted there);
* semantics: query ``i`` of sequence ``b`` attends to positions ``j < cache_seqlens[b]`` of
  the sequence's pages, with ``causal`` masking ``j > i + seqlen_k - seqlen_q`` (the
  bottom-right aligned mask of ``attention_ref`` / ``construct_local_mask`` in
  ``mate/testing/flash_attn.py``); query head ``h`` on KV head ``h // (nheads / nheads_k)``
  (the same reference repeats KV heads); a query row with no visible key gives zeros and a
  log-sum-exp of ``-inf`` (``lse_ref_from_score`` there);
* constraints: bfloat16 / float16 only, head size <= 512 (``docs/flash_attention.md``);
  int32 page tables and lengths (``tests/test_fmha.py``), ``max_seqlen_q`` given with
  ``cu_seqlens_q`` (the docstring: "must provided if varlen forward").

``num_splits`` and ``pack_gqa`` are performance knobs and are accepted and ignored.
"""

from __future__ import annotations

import types

import torch

__all__ = ["FlashAttnWithKVCacheEmulation", "emulated_mate_module"]

_HALF = (torch.bfloat16, torch.float16)
_UNMODELLED = ("k", "v", "qv", "rotary_cos", "rotary_sin", "cache_batch_idx", "cache_leftpad",
               "cu_seqlens_k_new", "rotary_seqlens", "q_descale", "k_descale", "v_descale",
               "learnable_sink", "scheduler_metadata", "cp_tot_seqused_k")


class FlashAttnWithKVCacheEmulation:
    """A callable with ``mate.flash_attn_with_kvcache``'s signature (paged subset).

    ``calls`` records the host arguments of every call (``causal``, ``max_seqlen_q``, the
    page size, the batch size)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []

    def __call__(self, q, k_cache, v_cache, *, cache_seqlens=None, page_table=None,
                 cu_seqlens_q=None, max_seqlen_q=None, softmax_scale=None, causal=False,
                 window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=0,
                 pack_gqa=None, sm_margin=0, return_softmax_lse=False, cp_world_size=1,
                 cp_rank=0, rotary_interleaved=True, **others):
        used = sorted(name for name, value in others.items() if value is not None)
        unknown = sorted(set(others) - set(_UNMODELLED))
        if unknown:
            raise TypeError(f"flash_attn_with_kvcache() got unexpected keywords {unknown}")
        if used:
            raise NotImplementedError(f"the emulation does not model {used}")
        if tuple(window_size) not in ((-1, -1), (None, None)) or attention_chunk or softcap:
            raise NotImplementedError("the emulation models no local window, chunk or softcap")
        if cp_world_size != 1:
            raise NotImplementedError("the emulation models no context parallelism")
        if page_table is None:
            raise NotImplementedError("the emulation models the paged KV form only")
        if q.dtype not in _HALF or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
            raise ValueError(f"mate's flash attention takes bfloat16/float16 q, k, v of one "
                             f"dtype; got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
        assert k_cache.stride(-1) == 1, "k_cache must have contiguous last dimension"
        assert v_cache.stride(-1) == 1, "v_cache must have contiguous last dimension"
        if page_table.dtype != torch.int32:
            raise TypeError(f"page_table must be int32, got {page_table.dtype}")
        if k_cache.dim() != 4 or v_cache.shape[:3] != k_cache.shape[:3]:
            raise ValueError(f"paged caches must be (num_blocks, page_block_size, nheads_k, "
                             f"headdim), got {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
        num_blocks, page_size, num_kv_heads, head_dim = k_cache.shape
        batch = page_table.shape[0]
        if cu_seqlens_q is None:
            raise NotImplementedError("the emulation models the ragged q form (cu_seqlens_q)")
        if cu_seqlens_q.dtype != torch.int32 or cu_seqlens_q.shape != (batch + 1,):
            raise ValueError(f"cu_seqlens_q must be int32 ({batch + 1},), got "
                             f"{cu_seqlens_q.dtype} {tuple(cu_seqlens_q.shape)}")
        if max_seqlen_q is None:
            raise ValueError("max_seqlen_q must be given with cu_seqlens_q")
        total_q, num_heads, q_head_dim = q.shape
        if q_head_dim != head_dim or head_dim > 512:
            raise ValueError(f"head size {q_head_dim} vs cache {head_dim} (mate: <= 512)")
        if num_heads % num_kv_heads:
            raise ValueError(f"{num_heads} query heads for {num_kv_heads} KV heads")
        if isinstance(cache_seqlens, int):
            cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32)
        if cache_seqlens is None or cache_seqlens.dtype != torch.int32:
            raise TypeError("cache_seqlens must be an int or an int32 tensor")
        self.calls.append({"causal": causal, "max_seqlen_q": max_seqlen_q,
                           "page_size": page_size, "batch": batch})

        scale = head_dim**-0.5 if softmax_scale is None else softmax_scale
        starts = cu_seqlens_q.cpu().long().tolist()
        lengths = cache_seqlens.cpu().long().tolist()
        table = page_table.cpu().long()
        keys, values = k_cache.detach().cpu(), v_cache.detach().cpu()
        queries = q.detach().cpu().float()
        group = num_heads // num_kv_heads
        out = torch.zeros(total_q, num_heads, v_cache.shape[-1], dtype=torch.float32)
        lse = torch.full((num_heads, total_q), float("-inf"))
        for b in range(batch):
            first, last, seqlen_k = starts[b], starts[b + 1], lengths[b]
            seqlen_q = last - first
            if seqlen_q > max_seqlen_q:
                raise ValueError(f"sequence {b}: {seqlen_q} queries > max_seqlen_q {max_seqlen_q}")
            if seqlen_q == 0 or seqlen_k == 0:
                continue
            if -(-seqlen_k // page_size) > table.shape[1]:
                raise ValueError(f"cache_seqlens[{b}]={seqlen_k} needs more pages than the table")
            positions = torch.arange(seqlen_k)
            pages = table[b, positions // page_size]
            if int(pages.min()) < 0 or int(pages.max()) >= num_blocks:
                raise ValueError(f"page ids out of range in page_table[{b}]")
            k = keys[pages, positions % page_size].float().repeat_interleave(group, dim=1)
            v = values[pages, positions % page_size].float().repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", queries[first:last], k) * scale
            if causal:  # bottom-right aligned: query i sees keys j <= i + seqlen_k - seqlen_q
                rows = torch.arange(seqlen_q)[:, None] + (seqlen_k - seqlen_q)
                scores = scores.masked_fill(positions[None, :] > rows, float("-inf"))
            row_lse = torch.logsumexp(scores, dim=-1)  # [H, seqlen_q]
            weights = torch.exp(scores - row_lse.nan_to_num(neginf=0.0)[..., None])
            weights = torch.where(torch.isfinite(row_lse)[..., None], weights, 0.0)
            out[first:last] = torch.einsum("hqk,khd->qhd", weights, v)
            lse[:, first:last] = row_lse
        out = out.to(q.dtype).to(q.device)
        if return_softmax_lse:
            return out, lse.to(q.device)
        return out


def emulated_mate_module() -> types.ModuleType:
    """A module to install as ``sys.modules["mate"]``: the emulated
    ``flash_attn_with_kvcache`` and a version string that says it is an emulation."""
    module = types.ModuleType("mate", "EMULATION of mate (eagle-hal tests); not MooreThreads/mate")
    module.__version__ = "0+emulation"
    module.flash_attn_with_kvcache = FlashAttnWithKVCacheEmulation()
    return module
