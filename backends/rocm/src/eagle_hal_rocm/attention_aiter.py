"""DECODE attention through aiter's ``paged_attention_v1``; every other mode on the shared path.

What aiter documents, and where (paths in the ROCm/aiter repository unless said otherwise):

* Signature: ``paged_attention_v1(out, workspace_buffer, query, key_cache, value_cache,
  scale, block_tables, cu_query_lens, context_lens, max_context_len, alibi_slopes,
  kv_cache_dtype, kv_cache_layout, logits_soft_cap, k_scale, v_scale, fp8_out_scale=None,
  partition_size=256, mtp=1, ...)`` (``aiter/ops/attention.py``), exported at the package top
  level (``aiter/__init__.py`` imports ``.ops.attention`` with ``*``). It writes ``out`` in
  place.
* ``kv_cache_layout="NHD"``: ``key_cache`` and ``value_cache`` are ``[num_blocks, block_size,
  num_kv_heads, head_size]``; ``"HND"``: ``[num_blocks, num_kv_heads, block_size,
  head_size]`` (``op_tests/test_pa_v1.py`` builds both from one cache;
  ``csrc/cpp_itfs/pa/pa_v1.py`` reads ``num_kv_heads``, ``block_size`` and the block / head
  / token strides from ``key_cache`` by that layout and hands the kernel those three strides
  only, for both caches; the kernel loads 16-byte runs of ``head_size``, so the innermost
  dimension must be contiguous (``csrc/cpp_itfs/pa/pa_kernels.cuh``).
* ``query`` ``[num_seqs, num_heads, head_size]`` bfloat16/float16 (``pa_v1.py`` raises for
  anything else); ``block_tables`` int32 ``[num_seqs, max_num_blocks_per_seq]``;
  ``context_lens`` int32 ``[num_seqs]``; ``cu_query_lens`` int32 ``[num_seqs + 1]`` (the test
  passes ``arange(num_seqs + 1)``: one query per sequence). A sequence with more than one
  query is skipped by the kernel, its output left unwritten (``pa_v1.cuh``:
  ``if(query_len > 1) return;``) -- so this op is a decode op and nothing else here uses it.
* Attention: softmax(``scale`` * q.k) over the first ``context_lens[b]`` tokens of the
  sequence's block list, query head ``h`` reading KV head ``h // (num_heads / num_kv_heads)``
  (the torch reference ``run_torch`` in ``op_tests/test_pa_v1.py``). ``k_scale`` /
  ``v_scale`` are float32 ones for ``kv_cache_dtype="auto"``.
* Partitions of 256 tokens (``_PARTITION_SIZE_ROCM``; the kernel's ``T_PAR_SIZE``), block
  size dividing 256; ``max_num_partitions = ceil(max_context_len / 256)``; a
  ``workspace_buffer`` of uint8 holding two float32 ``[num_seqs, num_heads, partitions]``
  arrays and one ``[num_seqs, num_heads, partitions, head_size]`` array of the query dtype
  (``pa_v1.cpp.jinja``; sized the same way in ``op_tests/test_pa_v1.py`` and in vLLM's
  ``vllm/v1/attention/backends/rocm_aiter_fa.py``).
* Supported sizes: vLLM's aiter backend (same file) declares kernel block sizes 16 and 32,
  head sizes 64, 128, 256 and dtypes float16/bfloat16, notes that the kernel needs head
  size >= 64, and runs ``paged_attention_v1`` with ``"NHD"`` for its decodes, under graph
  capture of uniform single-token decode batches.

Design. The KV store's NHD storage ``[num_slots, H_kv, D]`` viewed as ``[num_pages,
page_size, H_kv, D]`` *is* aiter's NHD cache, so the op reads the store in place: no second
cache, no conversion, and every write or move the engine makes (``write_kv``,
``move_kv``) is what the op reads. The new token's K/V are written through
``kv_store.write_kv`` before the call. (aiter's older ``paged_attention_rocm`` /
``pa_fwd_asm`` take ``key_cache [num_blocks, num_kv_heads, head_size / x, block_size, x]``
with ``x = 16 / element size`` and ``value_cache [num_blocks, num_kv_heads, head_size,
block_size]`` (``aiter/ops/attention.py``, ``op_tests/test_pa_v1.py``); no view of NHD or
HND storage has that shape, so using them would need a second cache kept in step with
every write and move: not done.)

Modes: only ``DECODE`` goes to aiter. ``EXTEND``, ``DRAFT_EXTEND`` (several queries per
request, causal), ``TARGET_VERIFY`` (tree mask) and ``DRAFT_DECODE`` (per-branch key sets)
are outside what ``paged_attention_v1`` computes and stay on the ``fallback`` backend.

Graphs: ``plan_for_capture`` sizes the block table, the workspace and ``max_context_len``
(a host value fixed at capture) for a full ``req_to_token`` row; ``plan_for_replay``
refreshes the block table and context lengths in place. The kernel skips partitions past
a sequence's length, so the larger ``max_context_len`` costs only empty work-groups.
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
    ForwardMode,
    page_table,
    paged_view,
)

__all__ = [
    "PAGE_SIZES",
    "PARTITION_SIZE",
    "AiterDecodeAttention",
    "AiterDecodeMetadata",
    "decode_geometry_problem",
    "workspace_bytes",
]

PARTITION_SIZE = 256  # the kernel's T_PAR_SIZE
PAGE_SIZES = (16, 32)  # vLLM's aiter backend: get_supported_kernel_block_sizes
HEAD_SIZES = (64, 128, 256)  # vLLM's aiter backend: get_supported_head_sizes
DTYPES = (torch.bfloat16, torch.float16)


def decode_geometry_problem(config: AttentionConfig) -> str | None:
    """Why aiter's paged decode cannot serve this model's attention, or ``None`` if it can."""
    layout = config.kv_store.layout
    if layout.order != "NHD":
        return f"KV layout {layout.order} (aiter reads it as NHD only here)"
    if layout.page_size not in PAGE_SIZES:
        return f"page size {layout.page_size} (aiter's paged decode: {PAGE_SIZES})"
    if config.head_dim not in HEAD_SIZES:
        return f"head size {config.head_dim} (aiter's paged decode: {HEAD_SIZES})"
    dtype = config.kv_store.k_buffer(0).dtype
    if dtype not in DTYPES:
        return f"KV dtype {dtype} (aiter's paged decode: bfloat16, float16)"
    return None


def workspace_bytes(num_seqs: int, num_heads: int, max_context_len: int, head_size: int,
                    element_size: int) -> int:
    """Bytes of ``workspace_buffer``: float32 exp-sums and max-logits per (sequence, head,
    partition), and a partial output per (sequence, head, partition) in the query dtype."""
    partitions = -(-max_context_len // PARTITION_SIZE)
    per_head = num_seqs * num_heads * partitions
    return per_head * head_size * element_size + 2 * per_head * 4


@dataclasses.dataclass
class AiterDecodeMetadata(AttentionMetadata):
    """What one decode forward hands ``paged_attention_v1`` (device tensors except
    ``max_context_len``, a host value fixed at planning)."""

    block_tables: torch.Tensor  # int32 [B, pages]
    context_lens: torch.Tensor  # int32 [B]: prefix + the new token
    cu_query_lens: torch.Tensor  # int32 [B + 1]: one query per request
    workspace: torch.Tensor  # uint8, workspace_bytes(...)
    max_context_len: int


class AiterDecodeAttention(FastPathAttention):
    """``DECODE`` through ``paged_attention_v1`` over the KV store in place, captured
    decodes included; everything else through ``fallback`` (metadata, forward and graph
    hooks alike).

    ``paged_attention_v1`` is aiter's op or an emulation with its signature. Raises
    ``ValueError`` for a model ``decode_geometry_problem`` rejects.
    """

    metadata_type = AiterDecodeMetadata

    def __init__(
        self,
        config: AttentionConfig,
        paged_attention_v1: Callable[..., Any],
        fallback: AttentionBackend,
    ) -> None:
        super().__init__(config, fallback)
        problem = decode_geometry_problem(config)
        if problem is not None:
            raise ValueError(f"aiter's paged decode cannot serve this model: {problem}")
        self.paged_attention_v1 = paged_attention_v1
        self.page_size = config.kv_store.layout.page_size
        device = config.req_to_token.device
        self._unit_scale = torch.ones(1, dtype=torch.float32, device=device)  # k_scale, v_scale

    # -- planning ------------------------------------------------------------------------

    def serves(self, batch: ForwardBatch) -> bool:
        return batch.mode is ForwardMode.DECODE

    def plan_fast(self, batch: ForwardBatch) -> AiterDecodeMetadata:
        return self._plan_decode(batch, None)

    def _plan_decode(self, batch: ForwardBatch, max_context_len: int | None) -> AiterDecodeMetadata:
        """Tables for ``batch``, sized for ``max_context_len`` tokens (``None``: the batch's
        longest context). Raises ``ValueError`` unless every request has one query."""
        batch_size = batch.batch_size
        if any(n != 1 for n in batch.extend_lens_cpu) or batch.num_tokens != batch_size:
            raise ValueError(f"decode needs one token per request, got {batch.extend_lens_cpu}")
        if max_context_len is None:
            max_context_len = max(batch.prefix_lens_cpu, default=0) + 1
        config = self.config
        device = config.req_to_token.device
        num_pages = -(-max_context_len // self.page_size)
        element_size = config.kv_store.k_buffer(0).element_size()
        nbytes = workspace_bytes(batch_size, config.num_heads, max_context_len,
                                 config.head_dim, element_size)
        return AiterDecodeMetadata(
            block_tables=page_table(config.req_to_token, batch.table_rows, num_pages,
                                    self.page_size),
            context_lens=(batch.prefix_lens + 1).to(torch.int32),
            cu_query_lens=torch.arange(batch_size + 1, dtype=torch.int32, device=device),
            workspace=torch.empty(nbytes, dtype=torch.uint8, device=device),
            max_context_len=max_context_len,
        )

    # -- graph hooks ---------------------------------------------------------------------

    def captures(self, batch: ForwardBatch) -> bool:
        return batch.mode is ForwardMode.DECODE

    def plan_fast_capture(self, batch: ForwardBatch) -> AiterDecodeMetadata:
        """Tables and workspace for a full ``req_to_token`` row."""
        return self._plan_decode(batch, self.config.req_to_token.shape[1])

    def replay_fast(self, batch: ForwardBatch, metadata: AiterDecodeMetadata) -> None:
        """Recompute the block table and context lengths and copy them into the captured
        tensors. Raises ``ValueError`` for another batch size or mode."""
        if batch.mode is not ForwardMode.DECODE:
            raise ValueError(f"replaying a captured decode with a {batch.mode.value} batch")
        if batch.batch_size != metadata.context_lens.shape[0]:
            raise ValueError(
                f"replay batch of {batch.batch_size} requests, captured "
                f"{metadata.context_lens.shape[0]}"
            )
        fresh = self._plan_decode(batch, metadata.max_context_len)
        metadata.block_tables.copy_(fresh.block_tables)
        metadata.context_lens.copy_(fresh.context_lens)

    def fast_host_updates(
        self, batch: ForwardBatch, metadata: AiterDecodeMetadata
    ) -> dict[str, Any] | None:
        """None: the decode's one host value, ``max_context_len``, is the capture's bound."""
        return None

    # -- per layer -----------------------------------------------------------------------

    def forward_fast(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
        metadata: AiterDecodeMetadata,
    ) -> torch.Tensor:
        """Write ``k``/``v`` ``[B, H_kv, D]`` at ``out_cache_loc``, then one
        ``paged_attention_v1`` call over the store's pages; ``[B, H, D]`` in ``q.dtype``."""
        store = self.config.kv_store
        store.write_kv(layer, batch.out_cache_loc, k, v)
        key_cache = paged_view(store.k_buffer(layer), self.page_size)  # [pages, page, H_kv, D]
        value_cache = paged_view(store.v_buffer(layer), self.page_size)
        query = q.to(key_cache.dtype).contiguous()  # [B, H, D]
        out = torch.empty_like(query)
        self.paged_attention_v1(
            out, metadata.workspace, query, key_cache, value_cache, self.config.scaling,
            metadata.block_tables, metadata.cu_query_lens, metadata.context_lens,
            metadata.max_context_len,
            None,  # alibi_slopes
            "auto",  # kv_cache_dtype: the caches hold the query dtype
            "NHD",  # kv_cache_layout
            0.0,  # logits_soft_cap: off
            self._unit_scale, self._unit_scale,  # k_scale, v_scale
            None,  # fp8_out_scale
            PARTITION_SIZE,
        )
        return out.to(q.dtype)
