"""Attention on Ascend NPUs through torch_npu's fused inference attention over a paged cache.

Every mode writes the new K/V with ``_npu_reshape_and_cache`` (int32 slots) and reads the
cached prefix through ``npu_fused_infer_attention_score`` with a ``block_table`` (block size
128), queries in ``BSND`` layout padded to the longest request:

* ``EXTEND`` / ``DRAFT_EXTEND``: one call over prefix + new tokens, ``sparse_mode=3`` (causal
  aligned to the bottom-right of each request's rectangle) with the compressed 2048 x 2048
  mask; ``DECODE`` (one query per request): one call, no mask.
* ``TARGET_VERIFY``, by default the core's LSE-merge composite: one call over the prefix
  only (no mask, ``softmax_lse_flag=True``), dense attention over the N x N tree block in
  torch, and the exact LSE merge. No tree mask ever reaches the fused operator, so a release
  that ignores masks in some sparse mode cannot silently break verification. The
  alternative, ``verify_with_mask=True``, hands the operator an explicit ``[B, 1, N,
  prefix + N]`` mask under ``sparse_mode=0``; it relies on the engine placing tree node
  ``j`` at position ``prefix_len + j`` of the request's table (the EAGLE worker does), and
  on the operator honouring the mask, which the conformance comparison must establish.
* ``DRAFT_DECODE``: the same composite: the K branch queries of a request over its prefix
  through the fused call, each branch over its own ancestors densely, merged.

The fused operator computes in float16/bfloat16; this backend hands it the KV storage's
dtype.

Graph hooks: ``plan_for_capture`` sizes the block table (and an explicit verify mask) for
a full ``req_to_token`` row and gives every tensor the graph reads its own buffer;
``plan_for_replay`` re-plans and copies into them. The fused call's host lengths
(``actual_seq_lengths_kv``, and ``actual_seq_lengths`` for multi-token queries) stay as
captured on the device; ``replay_host_updates`` returns them for ``NPUGraph.update``, one
entry per fused call the captured forward made (one per layer it ran).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from eagle_hal.plugin_api import (
    AttentionBackend,
    AttentionConfig,
    AttentionMetadata,
    ForwardBatch,
    ForwardMode,
    TreeMaskMode,
    decode_tree_mask,
    gather_kv_slots,
    masked_attention_with_lse,
    merge_attention_states,
)

from eagle_hal_npu import glue
from eagle_hal_npu.graphs import HOST_UPDATE_KEY
from eagle_hal_npu.ops import NpuOps

__all__ = ["NpuAttentionBackend", "NpuAttentionMetadata"]

_CAUSAL = 3  # sparse_mode: rightDownCausal with the compressed mask
_DEFAULT = 0  # sparse_mode: the given mask (or none)


@dataclasses.dataclass
class NpuAttentionMetadata(AttentionMetadata):
    """Per-forward inputs of the fused call and of the torch-side parts."""

    query_lens: tuple[int, ...]  # per request
    max_queries: int
    fused_kv_lens: list[int]  # actual_seq_lengths_kv of the fused call (host)
    block_table: torch.Tensor  # int32 [B, max_blocks]
    composite: bool  # prefix through the fused call, own keys densely, merged
    atten_mask: torch.Tensor | None = None  # NPU convention: true = masked
    sparse_mode: int = _DEFAULT
    own_visible: torch.Tensor | None = None  # composite: [B, Q, own_keys] bool
    prefix_lens: torch.Tensor | None = None  # composite: [B] on the device
    query_gather: torch.Tensor | None = None  # ragged: [B * max_queries] token of each row
    token_scatter: torch.Tensor | None = None  # ragged: [T] row of each token
    layers_run: set[int] = dataclasses.field(default_factory=set)  # layers that made a fused call


_REPLAYED_TENSORS = ("block_table", "own_visible", "prefix_lens", "query_gather", "token_scatter")


class NpuAttentionBackend(AttentionBackend):
    """Every ``ForwardMode`` through ``NpuOps`` (torch_npu's operators or an emulation).

    Several forwards may share a graph: each ``plan_for_capture`` clones the tensors replay
    writes, and ``replay_host_updates`` gives one ``cpu_update_input`` entry per fused call.
    """

    tree_mask_mode = TreeMaskMode.TREE_BLOCK
    multi_forward_graphs = True

    def __init__(
        self, config: AttentionConfig, ops: NpuOps, *, verify_with_mask: bool = False
    ) -> None:
        super().__init__(config)
        layout = config.kv_store.layout
        if layout.order != "NHD":
            raise ValueError(f"the NPU attention reads NHD storage, got {layout.order}")
        if layout.page_size != glue.MULTI_TOKEN_BLOCK_SIZE:
            raise ValueError(
                f"the fused NPU attention needs page size {glue.MULTI_TOKEN_BLOCK_SIZE} for "
                f"multi-token queries, got {layout.page_size}"
            )
        self.ops = ops
        self.block_size = layout.page_size
        self.verify_with_mask = verify_with_mask
        self._causal_mask: torch.Tensor | None = None

    # -- planning ------------------------------------------------------------------------

    def plan(self, batch: ForwardBatch) -> NpuAttentionMetadata:
        """Block table, host lengths, masks and query padding for ``batch``; no
        device-to-host read. Raises ``ValueError`` for a batch inconsistent with its mode."""
        return self._plan(batch, None)

    def _plan(self, batch: ForwardBatch, kv_capacity: int | None) -> NpuAttentionMetadata:
        """``plan`` with the block table and an explicit verify mask sized for
        ``kv_capacity`` keys (``None``: the batch's longest)."""
        mode, prefix_lens = batch.mode, batch.prefix_lens_cpu
        if mode is ForwardMode.DRAFT_DECODE:
            query_lens = (batch.num_branches,) * batch.batch_size
        else:
            query_lens = batch.extend_lens_cpu
        if sum(query_lens) != batch.num_tokens:
            raise ValueError(
                f"{mode.value}: {batch.num_tokens} tokens but the per-request query counts "
                f"{query_lens} sum to {sum(query_lens)}"
            )
        max_queries = max(query_lens, default=0)
        composite = mode is ForwardMode.DRAFT_DECODE or (
            mode is ForwardMode.TARGET_VERIFY and not self.verify_with_mask
        )
        fused_kv_lens = self._fused_kv_lens(prefix_lens, query_lens, composite)
        max_kv = max(fused_kv_lens, default=1) if kv_capacity is None else kv_capacity
        table = glue.block_table(
            self.config.req_to_token, batch.table_rows, max_kv, self.block_size
        )
        metadata = NpuAttentionMetadata(query_lens, max_queries, fused_kv_lens, table, composite)
        device = batch.out_cache_loc.device
        if mode is ForwardMode.TARGET_VERIFY:
            tree_block = self._tree_block(batch, max_queries)
            if composite:
                metadata.own_visible = tree_block
            else:
                mask_width = max(prefix_lens) + max_queries if kv_capacity is None else kv_capacity
                metadata.atten_mask = glue.tree_verify_mask(tree_block, prefix_lens, mask_width)
        elif mode is ForwardMode.DRAFT_DECODE:
            metadata.own_visible = self._branch_visibility(batch)
        elif max_queries > 1:
            metadata.sparse_mode = _CAUSAL
            metadata.atten_mask = self._compressed_causal_mask(device)
        if composite:
            metadata.prefix_lens = torch.tensor(prefix_lens, device=device, dtype=torch.int64)
        if any(n != max_queries for n in query_lens):
            self._plan_ragged(metadata, device)
        return metadata

    @staticmethod
    def _fused_kv_lens(
        prefix_lens: tuple[int, ...], query_lens: tuple[int, ...], composite: bool
    ) -> list[int]:
        """``actual_seq_lengths_kv``: the prefix (composite) or prefix plus new tokens."""
        return list(prefix_lens) if composite else glue.kv_lengths(prefix_lens, query_lens)

    def _compressed_causal_mask(self, device: torch.device) -> torch.Tensor:
        if self._causal_mask is None or self._causal_mask.device != device:
            self._causal_mask = glue.compressed_causal_mask(device)
        return self._causal_mask

    @staticmethod
    def _tree_block(batch: ForwardBatch, num_draft_tokens: int) -> torch.Tensor:
        if batch.tree_mask is None:
            raise ValueError("target_verify needs batch.tree_mask")
        if any(n != num_draft_tokens for n in batch.extend_lens_cpu):
            raise ValueError(
                f"target_verify needs the same number of tree tokens per request, got "
                f"{batch.extend_lens_cpu}"
            )
        tree_block, _ = decode_tree_mask(
            batch.tree_mask, TreeMaskMode.TREE_BLOCK, batch.prefix_lens_cpu, num_draft_tokens,
            max(batch.prefix_lens_cpu, default=0),
        )
        return tree_block  # [B, N, N]

    @staticmethod
    def _branch_visibility(batch: ForwardBatch) -> torch.Tensor:
        """Branch ``k`` of a request sees its own ``depth`` columns of the flattened
        ``draft_kv_slots`` rows: ``[B, K, K * depth]``."""
        slots, branches = batch.draft_kv_slots, batch.num_branches
        if slots is None or slots.shape[0] != batch.batch_size * branches:
            raise ValueError(
                f"draft_decode needs draft_kv_slots [B * K, depth] with B * K = "
                f"{batch.batch_size * branches} rows"
            )
        depth = slots.shape[1]
        device = slots.device
        branch_of_column = torch.arange(branches * depth, device=device) // depth
        own = branch_of_column[None, :] == torch.arange(branches, device=device)[:, None]
        return own[None].expand(batch.batch_size, branches, branches * depth)

    @staticmethod
    def _plan_ragged(metadata: NpuAttentionMetadata, device: torch.device) -> None:
        lens = torch.tensor(metadata.query_lens, dtype=torch.int64)
        batch_size, max_queries = len(metadata.query_lens), metadata.max_queries
        request = torch.repeat_interleave(torch.arange(batch_size), lens)  # [T]
        offset = torch.arange(int(lens.sum())) - (torch.cumsum(lens, 0) - lens)[request]
        token_scatter = request * max_queries + offset  # [T]
        query_gather = torch.zeros(batch_size * max_queries, dtype=torch.int64)
        query_gather[token_scatter] = torch.arange(int(lens.sum()))
        metadata.token_scatter = token_scatter.to(device)
        metadata.query_gather = query_gather.to(device)

    # -- graph hooks ---------------------------------------------------------------------

    def plan_for_capture(self, batch: ForwardBatch) -> NpuAttentionMetadata:
        """``plan`` at the width of a full ``req_to_token`` row, every tensor the graph
        reads in a buffer of its own (the shared causal mask is constant)."""
        metadata = self._plan(batch, self.config.req_to_token.shape[1])
        for name in self._replayed_tensors(metadata):
            tensor = getattr(metadata, name)
            if tensor is not None:
                setattr(metadata, name, tensor.clone(memory_format=torch.contiguous_format))
        return metadata

    def plan_for_replay(self, batch: ForwardBatch, metadata: AttentionMetadata) -> None:
        """Re-plan ``batch`` at the captured width and copy into ``metadata``'s tensors.
        Raises ``ValueError`` for a batch of another shape than the capture's."""
        if not isinstance(metadata, NpuAttentionMetadata):
            raise TypeError(f"metadata from another backend: {type(metadata).__name__}")
        fresh = self._plan(batch, self.config.req_to_token.shape[1])
        captured = (metadata.query_lens, metadata.composite, metadata.sparse_mode)
        replayed = (fresh.query_lens, fresh.composite, fresh.sparse_mode)
        if replayed != captured:
            raise ValueError(
                f"replay batch (query lengths, composite, sparse mode) {replayed} differs "
                f"from the captured {captured}"
            )
        for name in self._replayed_tensors(metadata):
            target, value = getattr(metadata, name), getattr(fresh, name)
            if target is None and value is None:
                continue
            if target is None or value is None or target.shape != value.shape:
                raise ValueError(f"replay batch's {name} does not fit the captured one")
            target.copy_(value)

    def replay_host_updates(
        self, batch: ForwardBatch, metadata: AttentionMetadata
    ) -> dict[str, Any] | None:
        """``{HOST_UPDATE_KEY: cpu_update_input}`` for ``NPUGraph.update``: ``batch``'s
        fused-call lengths, once per layer the captured forward ran."""
        if not isinstance(metadata, NpuAttentionMetadata):
            raise TypeError(f"metadata from another backend: {type(metadata).__name__}")
        if not metadata.layers_run:
            raise ValueError("replay_host_updates before any captured forward ran")
        kv_lens = self._fused_kv_lens(
            batch.prefix_lens_cpu, metadata.query_lens, metadata.composite
        )
        query_lens = list(metadata.query_lens) if metadata.max_queries > 1 else None
        payload = glue.graph_update_payload(
            kv_lens, len(metadata.layers_run), query_lens=query_lens
        )
        return {HOST_UPDATE_KEY: payload}

    @staticmethod
    def _replayed_tensors(metadata: NpuAttentionMetadata) -> tuple[str, ...]:
        if metadata.sparse_mode == _CAUSAL:  # atten_mask: the backend's constant causal mask
            return _REPLAYED_TENSORS
        return (*_REPLAYED_TENSORS, "atten_mask")

    # -- per layer -----------------------------------------------------------------------

    def forward(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        """Write ``k``/``v`` ``[T, H_kv, D]`` at ``out_cache_loc``, attend with ``q``
        ``[T, H, D]`` as ``batch.mode`` prescribes; returns ``[T, H, D]`` in ``q.dtype``."""
        metadata = self.planned_metadata(batch, NpuAttentionMetadata)
        store = self.config.kv_store
        k_buffer, v_buffer = store.k_buffer(layer), store.v_buffer(layer)
        k_blocks, k_flat = glue.paged_cache_view(k_buffer, self.block_size)
        v_blocks, v_flat = glue.paged_cache_view(v_buffer, self.block_size)
        k, v = k.to(k_buffer.dtype), v.to(v_buffer.dtype)
        self.ops.write_kv(k, v, k_blocks, v_blocks, glue.to_npu_slots(batch.out_cache_loc))
        if q.shape[0] == 0:
            return q.new_empty(q.shape)

        batch_size, max_queries = len(metadata.query_lens), metadata.max_queries
        rows = q if metadata.query_gather is None else q[metadata.query_gather]
        queries = rows.to(k_buffer.dtype).reshape(batch_size, max_queries, *q.shape[1:])
        # queries: [B, S, H, D] (BSND)
        out, lse = self._fused(queries.contiguous(), k_flat, v_flat, metadata)
        metadata.layers_run.add(layer)
        if metadata.composite:
            out = self._merge_own_keys(layer, queries, out, lse, k, v, batch, metadata)
        out = out.reshape(batch_size * max_queries, *q.shape[1:])
        if metadata.token_scatter is not None:
            out = out[metadata.token_scatter]
        return out.to(q.dtype)  # [T, H, D]

    def _fused(
        self,
        queries: torch.Tensor,
        k_flat: torch.Tensor,
        v_flat: torch.Tensor,
        metadata: NpuAttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        config = self.config
        keywords = dict(
            block_table=metadata.block_table,
            actual_seq_lengths_kv=metadata.fused_kv_lens,
            num_heads=config.num_heads,
            num_key_value_heads=config.num_kv_heads,
            input_layout="BSND",
            block_size=self.block_size,
            sparse_mode=metadata.sparse_mode,
            softmax_lse_flag=metadata.composite,
        )
        if metadata.max_queries > 1:
            keywords["actual_seq_lengths"] = list(metadata.query_lens)
        if metadata.atten_mask is not None:
            keywords["atten_mask"] = metadata.atten_mask
        return self.ops.fused_attention(
            queries, k_flat, v_flat, scale=config.scaling, **keywords
        )  # out [B, S, H, D]; lse [B, H, S, 1] when requested

    def _merge_own_keys(
        self,
        layer: int,
        queries: torch.Tensor,
        prefix_out: torch.Tensor,
        prefix_lse: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
        metadata: NpuAttentionMetadata,
    ) -> torch.Tensor:
        """Attend densely over the forward's own keys and LSE-merge with the prefix part."""
        assert metadata.own_visible is not None and metadata.prefix_lens is not None
        batch_size = queries.shape[0]
        if batch.mode is ForwardMode.DRAFT_DECODE:
            assert batch.draft_kv_slots is not None
            store = self.config.kv_store
            own_slots = batch.draft_kv_slots.to(torch.int64).reshape(batch_size, -1)
            own_k = gather_kv_slots(store.k_buffer(layer), own_slots, "NHD")  # [B, K*depth, ..]
            own_v = gather_kv_slots(store.v_buffer(layer), own_slots, "NHD")
        else:  # TARGET_VERIFY: the tree keys are this forward's own k/v, request-major
            own_k = k.view(batch_size, -1, *k.shape[1:])
            own_v = v.view(batch_size, -1, *v.shape[1:])
        own_out, own_lse = masked_attention_with_lse(
            queries, own_k, own_v, metadata.own_visible, self.config.scaling
        )  # [B, Q, H, D], [B, Q, H]
        # A request without a cached prefix has nothing on the fused side, whatever the
        # operator returned for an empty KV row.
        empty = (metadata.prefix_lens == 0)[:, None, None]  # [B, 1, 1]
        prefix_lse = prefix_lse.float().squeeze(-1).transpose(1, 2)  # [B, Q, H]
        prefix_lse = prefix_lse.masked_fill(empty, float("-inf"))
        prefix_out = prefix_out.float().masked_fill(empty[..., None], 0.0)
        out, _ = merge_attention_states(prefix_out, prefix_lse, own_out, own_lse)
        return out  # [B, Q, H, D] float32
