"""Causal attention through mate's paged ``flash_attn_with_kvcache``; the rest on SDPA.

What mate documents, and where (paths in the MooreThreads/mate repository):

* ``flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, ..., cache_seqlens=None,
  ..., page_table=None, cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, ...,
  softmax_scale=None, causal=False, window_size=(-1, -1), ..., num_splits=0, ...,
  return_softmax_lse=False, ...)``, "FlashAttention3 compatible API"
  (``mate/mha_interface.py``), exported lazily by ``mate/__init__.py``.
* Paged KV: ``k_cache`` / ``v_cache`` ``(num_blocks, page_block_size, nheads_k, headdim)``
  with ``page_table`` ``(batch_size, max_num_blocks_per_seq)``; ``cache_seqlens`` the KV
  length of each sequence; a ragged ``q`` ``(total_q, nheads, headdim)`` with
  ``cu_seqlens_q`` ``(batch_size + 1)`` and ``max_seqlen_q``; the output ``(total_q,
  nheads, headdim_v)``. The caches' last dimension must be contiguous (asserted there).
  ``tests/test_fmha.py`` (``test_metadata``) calls exactly this form with int32
  ``page_table``, ``cache_seqlens`` and ``cu_seqlens_q``.
* ``causal=True`` masks key ``j`` for query ``i`` when ``j > i + seqlen_k - seqlen_q``: the
  causal mask aligned to the bottom-right corner, as in FlashAttention (the reference the
  tests compare with: ``attention_ref`` / ``construct_local_mask`` in
  ``mate/testing/flash_attn.py``).
* Coverage (``docs/flash_attention.md``): paged KV, page sizes "1, 16, 64, and arbitrary",
  bfloat16/float16 (no fp8, no float32 listed), any head size <= 512, causal masks.
  Hardware: MP31 (``README.md``).

Design. The KV store's NHD storage viewed as ``[num_pages, page_size, H_kv, D]`` is mate's
paged cache, so mate reads the store in place (no second cache; writes and moves the
engine makes are what it reads). The new tokens' K/V are written through
``kv_store.write_kv`` first, then one call with ``cache_seqlens = prefix + new tokens`` and
``causal=True``: query ``i`` of a request sees keys up to ``prefix + i``, which is the
contract of ``EXTEND``, ``DECODE`` and ``DRAFT_EXTEND``.

Left on the ``fallback`` (SDPA over gathered slots):

* ``TARGET_VERIFY`` and ``DRAFT_DECODE``: their key sets are a tree mask and per-branch
  slot lists, which a causal call does not express. (The prefix part could go through
  mate with ``return_softmax_lse`` and the core's LSE merge, as the NPU backend does; not
  done.)
* Captured forwards: what ``flash_attn_with_kvcache`` does on the host (its split
  heuristic, scheduler metadata) under MUSA graph capture is not documented, so
  ``plan_for_capture`` hands the capture to the fallback. With graphs on, mate serves the
  eager forwards: prefills of several prompts at once, prompts longer than the graph
  runner's largest token bucket, and any other forward it does not capture. One-request
  prefills replay from the graph runner's token-bucket graphs, on the fallback
  (a ``GraphRunner`` with ``prefill_graphs=False`` gives them to mate again; which is
  faster on MUSA is not measured).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from eagle_hal.plugin_api import (
    AttentionBackend,
    AttentionConfig,
    AttentionMetadata,
    FastPathAttention,
    ForwardBatch,
    page_table,
    paged_view,
)

__all__ = ["MAX_HEAD_SIZE", "MateCausalAttention", "MateCausalMetadata", "causal_geometry_problem"]

MAX_HEAD_SIZE = 512  # docs/flash_attention.md: "Any headdim <= 512"
DTYPES = (torch.bfloat16, torch.float16)


def causal_geometry_problem(config: AttentionConfig) -> str | None:
    """Why mate's paged attention cannot serve this model, or ``None`` if it can."""
    layout = config.kv_store.layout
    if layout.order != "NHD":
        return f"KV layout {layout.order} (mate's paged cache is NHD)"
    if config.head_dim > MAX_HEAD_SIZE:
        return f"head size {config.head_dim} (mate: <= {MAX_HEAD_SIZE})"
    dtype = config.kv_store.k_buffer(0).dtype
    if dtype not in DTYPES:
        return f"KV dtype {dtype} (mate's flash attention: bfloat16, float16)"
    return None


@dataclasses.dataclass
class MateCausalMetadata(AttentionMetadata):
    """What one causal forward hands ``flash_attn_with_kvcache``."""

    page_table: torch.Tensor  # int32 [B, pages]
    cache_seqlens: torch.Tensor  # int32 [B]: prefix + this forward's tokens
    cu_seqlens_q: torch.Tensor  # int32 [B + 1]
    max_seqlen_q: int


class MateCausalAttention(FastPathAttention):
    """``EXTEND`` / ``DECODE`` / ``DRAFT_EXTEND`` through mate's paged
    ``flash_attn_with_kvcache`` over the KV store in place (eager forwards); every other
    mode and every captured forward through ``fallback``.

    ``flash_attn_with_kvcache`` is mate's function or an emulation with its signature.
    Raises ``ValueError`` for a model ``causal_geometry_problem`` rejects.
    """

    metadata_type = MateCausalMetadata

    def __init__(
        self,
        config: AttentionConfig,
        flash_attn_with_kvcache: Callable[..., Any],
        fallback: AttentionBackend,
    ) -> None:
        super().__init__(config, fallback)
        problem = causal_geometry_problem(config)
        if problem is not None:
            raise ValueError(f"mate's paged attention cannot serve this model: {problem}")
        self.flash_attn_with_kvcache = flash_attn_with_kvcache
        self.page_size = config.kv_store.layout.page_size

    # -- planning; captures stay on the fallback (see the module docstring) ---------------

    def serves(self, batch: ForwardBatch) -> bool:
        return batch.mode.is_causal_extend

    def plan_fast(self, batch: ForwardBatch) -> MateCausalMetadata:
        """mate's tables for a causal mode. Raises ``ValueError`` when the token count
        disagrees with ``extend_lens``."""
        lens = batch.extend_lens_cpu
        if sum(lens) != batch.num_tokens:
            raise ValueError(f"{batch.mode.value}: {batch.num_tokens} tokens, extend_lens {lens}")
        config = self.config
        device = config.req_to_token.device
        longest = max((p + n for p, n in zip(batch.prefix_lens_cpu, lens, strict=False)), default=1)
        starts = [0]
        for n in lens:
            starts.append(starts[-1] + n)
        return MateCausalMetadata(
            page_table=page_table(config.req_to_token, batch.table_rows,
                                  max(1, -(-longest // self.page_size)), self.page_size),
            cache_seqlens=(batch.prefix_lens + batch.extend_lens).to(torch.int32),
            cu_seqlens_q=torch.tensor(starts, dtype=torch.int32).to(device, non_blocking=True),
            max_seqlen_q=max(lens, default=0),
        )

    # -- per layer -----------------------------------------------------------------------

    def forward_fast(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
        metadata: MateCausalMetadata,
    ) -> torch.Tensor:
        """Write ``k``/``v`` ``[T, H_kv, D]`` at ``out_cache_loc``, then one
        ``flash_attn_with_kvcache`` call over the store's pages; ``[T, H, D]`` in
        ``q.dtype``."""
        store = self.config.kv_store
        store.write_kv(layer, batch.out_cache_loc, k, v)
        k_cache = paged_view(store.k_buffer(layer), self.page_size)  # [pages, page, H_kv, D]
        v_cache = paged_view(store.v_buffer(layer), self.page_size)
        out = self.flash_attn_with_kvcache(
            q.to(k_cache.dtype).contiguous(),  # [T, H, D], ragged by cu_seqlens_q
            k_cache,
            v_cache,
            cache_seqlens=metadata.cache_seqlens,
            page_table=metadata.page_table,
            cu_seqlens_q=metadata.cu_seqlens_q,
            max_seqlen_q=metadata.max_seqlen_q,
            softmax_scale=self.config.scaling,
            causal=True,
        )
        return out.to(q.dtype)
