"""The pure-torch reference attention backend: every forward mode, any device, any page size.

``TorchAttentionBackend`` is the executable statement of the contract in
``eagle_hal.hal.attention``. It never deals in pages, only in slots: the cached prefix of
a request is ``req_to_token[row, 0:prefix_len]``, new tokens are written at
``out_cache_loc``, and a draft branch's earlier tokens are ``draft_kv_slots``.

How it computes. ``plan`` groups the query tokens by request and builds, once per forward:

* ``key_slots`` ``[B, max_keys]``: the slots of every key a request's queries may read. The
  first ``max_prefix`` columns hold the cached prefix; the rest hold the forward's own
  tokens (the request's run of ``out_cache_loc``; in DRAFT_DECODE the request's K rows of
  ``draft_kv_slots``, flattened). Padding columns point at ``out_cache_loc[0]``, a slot this
  very layer writes, so every gathered key is finite.
* ``visible`` ``[B, max_queries, max_keys]`` bool: which key each query attends to.
* for ragged batches, a gather index that pads the queries to ``[B, max_queries]`` and a
  scatter index that brings the outputs back to token order.

``forward`` (per layer) writes K/V through ``kv_store.write_kv``, gathers keys and values
with ``key_slots`` and calls ``scaled_dot_product_attention`` with the bool mask, batched
over requests. Arithmetic is float32 whatever the input dtype (inputs are upcast, the
output is cast back to ``q.dtype``): it is the reference the faster backends are compared
to. Padded query rows see every column, so no softmax row is empty; their outputs are
dropped.

Sliding windows and soft-capping (``AttentionConfig.layer_windows``, ``logit_softcap``):
``plan`` also records which token of the forward each of a request's own key columns is
(``own_tokens``); ``forward`` reads the positions of the queries and of those keys from
``batch.positions`` (current inside a graph as well) and narrows a windowed layer's
visibility to keys at positions ``> p - W``. With a soft-cap the scores are computed
explicitly (SDPA takes no cap).

Tree masks (TARGET_VERIFY) are read in any of the three ``TreeMaskMode`` layouts; the
constructor's ``tree_mask_mode`` picks the one this instance asks the core for. Row ``i``,
column ``j`` of a tree block is true when tree node ``i`` sees node ``j`` (itself included).

* ``TREE_BLOCK``: bool ``[B, N, N]`` (or flat ``[B * N * N]``); the prefix is always visible.
* ``BIT_PACKED``: integer ``[B, N]`` (or flat ``[B * N]``), bit ``j`` of node ``i``'s word set
  when node ``i`` sees node ``j``; the prefix is always visible. Needs ``N <= 64``.
* ``FULL``: per request a bool ``[N, prefix_len + N]`` block (prefix columns, then the tree
  block), the requests' blocks flattened and concatenated in batch order; a ``[B, N, P + N]``
  tensor is accepted when every request has prefix length ``P``.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from eagle_hal.hal.attention import (
    AttentionBackend,
    AttentionConfig,
    AttentionMetadata,
    ForwardBatch,
    ForwardMode,
)
from eagle_hal.hal.tree_mask import TreeMaskMode

__all__ = [
    "TorchAttentionBackend",
    "TorchAttentionMetadata",
    "decode_tree_mask",
    "gather_kv_slots",
]

_MAX_BIT_PACKED_NODES = 64  # bits in the widest integer a bit-packed mask word can be


@dataclasses.dataclass
class TorchAttentionMetadata(AttentionMetadata):
    """Per-forward gather indices and visibility for ``TorchAttentionBackend``."""

    key_slots: torch.Tensor  # [B, max_keys] int64 slot of each key column
    visible: torch.Tensor  # [B, max_queries, max_keys] bool
    max_queries: int
    # Ragged batches only (None when every request has max_queries query tokens):
    query_gather: torch.Tensor | None = None  # [B * max_queries] token index of each padded row
    token_scatter: torch.Tensor | None = None  # [T] padded row of each token
    # [B, own columns] token index of each own key column (padding: 0); None in DRAFT_DECODE
    own_tokens: torch.Tensor | None = None


def gather_kv_slots(buffer: torch.Tensor, slots: torch.Tensor, order: str) -> torch.Tensor:
    """Read ``slots`` (any shape ``S``) from one layer's K or V ``buffer``.

    ``buffer`` is ``[num_slots, H_kv, D]`` for ``order == "NHD"`` and ``[H_kv, num_slots, D]``
    for ``"HND"``. Returns ``[*S, H_kv, D]`` in both cases.
    """
    if order == "NHD":
        return buffer[slots]
    gathered = buffer[:, slots]  # [H_kv, *S, D]
    return gathered.movedim(0, -2)


def decode_tree_mask(
    tree_mask: torch.Tensor,
    mode: str,
    prefix_lens_cpu: tuple[int, ...],
    num_draft_tokens: int,
    max_prefix_len: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Turn a verify tree mask in layout ``mode`` into bool tensors.

    Returns ``(tree_block, prefix_visible)``: ``tree_block`` ``[B, N, N]`` and, for ``FULL``
    masks only, ``prefix_visible`` ``[B, N, max_prefix_len]`` (false beyond each request's
    prefix); ``None`` means the whole prefix is visible. Raises ``ValueError`` when the
    mask's size does not fit the layout.
    """
    batch_size, n = len(prefix_lens_cpu), num_draft_tokens
    if mode == TreeMaskMode.TREE_BLOCK:
        if tree_mask.numel() != batch_size * n * n:
            raise ValueError(
                f"tree_block mask has {tree_mask.numel()} elements, expected B*N*N = "
                f"{batch_size}*{n}*{n}"
            )
        return tree_mask.reshape(batch_size, n, n).to(torch.bool), None
    if mode == TreeMaskMode.BIT_PACKED:
        if n > _MAX_BIT_PACKED_NODES:
            raise ValueError(f"bit-packed tree masks hold at most 64 nodes, got N={n}")
        if tree_mask.numel() != batch_size * n:
            raise ValueError(
                f"bit_packed mask has {tree_mask.numel()} words, expected B*N = {batch_size}*{n}"
            )
        words = tree_mask.reshape(batch_size, n, 1).to(torch.int64)
        bits = torch.arange(n, device=tree_mask.device, dtype=torch.int64)
        return ((words >> bits) & 1).to(torch.bool), None  # [B, N, N]
    if mode == TreeMaskMode.FULL:
        expected = sum(n * (p + n) for p in prefix_lens_cpu)
        if tree_mask.numel() != expected:
            raise ValueError(
                f"full mask has {tree_mask.numel()} elements, expected "
                f"sum(N * (prefix_len + N)) = {expected}"
            )
        flat = tree_mask.reshape(-1).to(torch.bool)
        device = tree_mask.device
        tree_block = torch.empty(batch_size, n, n, dtype=torch.bool, device=device)
        prefix_visible = torch.zeros(batch_size, n, max_prefix_len, dtype=torch.bool, device=device)
        offset = 0
        for b, prefix_len in enumerate(prefix_lens_cpu):
            block = flat[offset : offset + n * (prefix_len + n)].view(n, prefix_len + n)
            prefix_visible[b, :, :prefix_len] = block[:, :prefix_len]
            tree_block[b] = block[:, prefix_len:]
            offset += n * (prefix_len + n)
        return tree_block, prefix_visible
    raise ValueError(f"unknown tree-mask mode {mode!r}; known: {TreeMaskMode.ALL}")


class TorchAttentionBackend(AttentionBackend):
    """Attention in plain torch for every ``ForwardMode``; see the module docstring.

    ``tree_mask_mode`` chooses the layout this instance asks for (default ``TREE_BLOCK``).
    Graph hooks: a captured plan reserves prefix columns for the whole ``req_to_token`` row,
    so any later prefix fits; ``plan_for_replay`` re-plans at that width and copies the
    result into the captured metadata's tensors. ``FULL`` masks (whose size follows the
    prefix lengths) cannot be replayed. Several forwards may share a graph: every
    ``plan_for_capture`` builds tensors of its own, and planning reads the index tensors
    and host lengths only.
    """

    multi_forward_graphs = True
    draft_slots_read_in_forward = True  # forward() rebuilds their key columns (see there)

    @property
    def lengths_read_in_forward(self) -> bool:  # type: ignore[override]
        """Prefix columns are masked by the device lengths; the host lengths only size
        them. ``FULL`` tree masks are laid out by the host lengths."""
        return self.tree_mask_mode != TreeMaskMode.FULL

    def __init__(
        self, config: AttentionConfig, tree_mask_mode: str = TreeMaskMode.TREE_BLOCK
    ) -> None:
        super().__init__(config)
        if tree_mask_mode not in TreeMaskMode.ALL:
            raise ValueError(
                f"unknown tree-mask mode {tree_mask_mode!r}; known: {TreeMaskMode.ALL}"
            )
        self.tree_mask_mode = tree_mask_mode

    # -- planning ------------------------------------------------------------------------

    def plan(self, batch: ForwardBatch) -> TorchAttentionMetadata:
        """Build key slots, visibility and query padding for ``batch``; reads only host
        lengths and device index tensors (no device-to-host sync). Raises ``ValueError``
        for a batch inconsistent with its mode."""
        return self._plan(batch, max(batch.prefix_lens_cpu, default=0))

    def _plan(self, batch: ForwardBatch, max_prefix: int) -> TorchAttentionMetadata:
        """``plan`` with ``max_prefix`` prefix columns (at least the longest prefix)."""
        device = batch.out_cache_loc.device
        batch_size = batch.batch_size

        if batch.mode is ForwardMode.DRAFT_DECODE:
            query_lens = self._draft_decode_query_lens(batch)
        else:
            query_lens = batch.extend_lens_cpu
        if sum(query_lens) != batch.num_tokens:
            raise ValueError(
                f"{batch.mode.value}: {batch.num_tokens} tokens but the per-request query "
                f"counts {query_lens} sum to {sum(query_lens)}"
            )
        max_queries = max(query_lens, default=0)

        prefix_cols = torch.arange(max_prefix, device=device)  # [max_prefix]
        # the device lengths decide; the host ones only size the columns (an upper bound)
        prefix_lens_dev = batch.prefix_lens.to(torch.int64)
        prefix_valid = prefix_cols[None, :] < prefix_lens_dev[:, None]  # [B, max_prefix]
        pad_slot = batch.out_cache_loc[:1].to(torch.int64)  # [1] a slot this layer writes
        rows = batch.table_rows.to(torch.int64)[:, None]
        prefix_slots = self.config.req_to_token[rows, prefix_cols[None, :]].to(torch.int64)
        prefix_slots = torch.where(prefix_valid, prefix_slots, pad_slot)  # [B, max_prefix]

        own_tokens = None
        if batch.mode is ForwardMode.DRAFT_DECODE:
            own_slots, own_visible = self._draft_decode_keys(batch, max_queries)
        else:
            own_slots, own_visible, own_tokens = self._new_token_keys(
                batch, query_lens, max_queries, pad_slot)
        prefix_visible = prefix_valid[:, None, :].expand(batch_size, max_queries, max_prefix)
        if batch.mode is ForwardMode.TARGET_VERIFY:
            own_visible, full_prefix_visible = self._tree_visibility(batch, max_queries, max_prefix)
            if full_prefix_visible is not None:
                prefix_visible = full_prefix_visible & prefix_valid[:, None, :]

        key_slots = torch.cat([prefix_slots, own_slots], dim=1)  # [B, max_keys]
        visible = torch.cat([prefix_visible, own_visible], dim=2)  # [B, max_queries, max_keys]

        metadata = TorchAttentionMetadata(key_slots, visible, max_queries, own_tokens=own_tokens)
        if any(n != max_queries for n in query_lens):
            self._plan_ragged_queries(metadata, query_lens, device)
        return metadata

    def _draft_decode_query_lens(self, batch: ForwardBatch) -> tuple[int, ...]:
        branches = batch.num_branches
        if batch.draft_kv_slots is None:
            raise ValueError("draft_decode needs batch.draft_kv_slots [B * K, depth]")
        if batch.draft_kv_slots.shape[0] != batch.batch_size * branches:
            raise ValueError(
                f"draft_kv_slots has {batch.draft_kv_slots.shape[0]} rows, expected "
                f"batch_size * num_branches = {batch.batch_size} * {branches}"
            )
        return (branches,) * batch.batch_size

    def _draft_decode_keys(
        self, batch: ForwardBatch, branches: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each request's K branch rows of ``draft_kv_slots``, flattened into key columns;
        branch ``k`` sees only its own ``depth`` columns."""
        assert batch.draft_kv_slots is not None
        device = batch.out_cache_loc.device
        depth = batch.draft_kv_slots.shape[1]
        own_slots = batch.draft_kv_slots.to(torch.int64).reshape(batch.batch_size, -1)
        branch_of_column = torch.arange(branches * depth, device=device) // depth
        own_visible = branch_of_column[None, :] == torch.arange(branches, device=device)[:, None]
        # [B, K, K * depth]
        return own_slots, own_visible[None].expand(batch.batch_size, branches, branches * depth)

    def _new_token_keys(
        self,
        batch: ForwardBatch,
        query_lens: tuple[int, ...],
        max_queries: int,
        pad_slot: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The request's own run of ``out_cache_loc`` as key columns, seen causally, and
        the token index of each column."""
        device = batch.out_cache_loc.device
        starts, total = [], 0
        for n in query_lens:
            starts.append(total)
            total += n
        starts_dev = torch.tensor(starts, device=device, dtype=torch.int64)
        lens_dev = torch.tensor(query_lens, device=device, dtype=torch.int64)
        cols = torch.arange(max_queries, device=device)  # [max_queries]
        valid = cols[None, :] < lens_dev[:, None]  # [B, max_queries]
        token = torch.where(valid, starts_dev[:, None] + cols[None, :], 0)
        own_slots = torch.where(valid, batch.out_cache_loc.to(torch.int64)[token], pad_slot)
        causal = cols[None, :] <= cols[:, None]  # [query, key]
        own_visible = causal[None] & valid[:, None, :]  # [B, max_queries, max_queries]
        return own_slots, own_visible, token

    def _tree_visibility(
        self, batch: ForwardBatch, num_draft_tokens: int, max_prefix: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if batch.tree_mask is None:
            raise ValueError("target_verify needs batch.tree_mask")
        if any(n != num_draft_tokens for n in batch.extend_lens_cpu):
            raise ValueError(
                f"target_verify needs the same number of tree tokens per request, got "
                f"{batch.extend_lens_cpu}"
            )
        return decode_tree_mask(
            batch.tree_mask, self.tree_mask_mode, batch.prefix_lens_cpu, num_draft_tokens,
            max_prefix,
        )

    @staticmethod
    def _plan_ragged_queries(
        metadata: TorchAttentionMetadata, query_lens: tuple[int, ...], device: torch.device
    ) -> None:
        lens = torch.tensor(query_lens, dtype=torch.int64)
        batch_size, max_queries = len(query_lens), metadata.max_queries
        request_of_token = torch.repeat_interleave(torch.arange(batch_size), lens)  # [T]
        starts = torch.cumsum(lens, 0) - lens  # [B]
        offset_in_request = torch.arange(int(lens.sum())) - starts[request_of_token]
        token_scatter = request_of_token * max_queries + offset_in_request  # [T]
        query_gather = torch.zeros(batch_size * max_queries, dtype=torch.int64)
        query_gather[token_scatter] = torch.arange(int(lens.sum()))
        metadata.token_scatter = token_scatter.to(device)
        metadata.query_gather = query_gather.to(device)
        # Padded query rows see every column: no empty softmax row (their output is dropped).
        pad_rows = torch.ones(batch_size * max_queries, dtype=torch.bool)
        pad_rows[token_scatter] = False
        metadata.visible = metadata.visible | pad_rows.view(batch_size, max_queries, 1).to(device)

    # -- graph hooks -----------------------------------------------------------------------

    def plan_for_capture(self, batch: ForwardBatch) -> TorchAttentionMetadata:
        """``plan`` with prefix columns for a full ``req_to_token`` row."""
        return self._plan(batch, self.config.req_to_token.shape[1])

    def plan_for_replay(self, batch: ForwardBatch, metadata: AttentionMetadata) -> None:
        """Re-plan ``batch`` at the captured width and copy into ``metadata`` in place.
        Raises ``ValueError`` when the batch's plan has another shape than the capture's."""
        if not isinstance(metadata, TorchAttentionMetadata):
            raise TypeError(f"metadata from another backend: {type(metadata).__name__}")
        fresh = self._plan(batch, self.config.req_to_token.shape[1])
        if fresh.max_queries != metadata.max_queries:
            raise ValueError(
                f"replay batch has {fresh.max_queries} queries per request, captured "
                f"{metadata.max_queries}"
            )
        for field in ("key_slots", "visible", "query_gather", "token_scatter", "own_tokens"):
            captured, value = getattr(metadata, field), getattr(fresh, field)
            if captured is None and value is None:
                continue
            if captured is None or value is None or captured.shape != value.shape:
                raise ValueError(
                    f"replay batch's {field} does not fit the captured one (another batch shape)"
                )
            captured.copy_(value)

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
        metadata = self.planned_metadata(batch, TorchAttentionMetadata)
        store = self.config.kv_store
        store.write_kv(layer, batch.out_cache_loc, k, v)
        if q.shape[0] == 0:
            return q.new_empty(q.shape)

        order = store.layout.order
        key_slots = metadata.key_slots
        if batch.mode is ForwardMode.DRAFT_DECODE:
            # the draft's own key columns from the slots' current values, not the plan's:
            # inside a tree-loop graph they are written after the hooks ran
            assert batch.draft_kv_slots is not None
            own = batch.draft_kv_slots.to(torch.int64).reshape(key_slots.shape[0], -1)
            key_slots = torch.cat([key_slots[:, : key_slots.shape[1] - own.shape[1]], own], 1)
        keys = gather_kv_slots(store.k_buffer(layer), key_slots, order)
        values = gather_kv_slots(store.v_buffer(layer), key_slots, order)
        # keys/values: [B, max_keys, H_kv, D]
        batch_size, max_queries = metadata.key_slots.shape[0], metadata.max_queries
        if metadata.query_gather is None:
            queries = q.view(batch_size, max_queries, *q.shape[1:])
        else:
            queries = q[metadata.query_gather].view(batch_size, max_queries, *q.shape[1:])
        # queries: [B, max_queries, H, D]
        visible = metadata.visible
        window = self.config.window(layer)
        if window is not None:
            visible = self._windowed(visible, window, batch, metadata, key_slots.shape[1])
        softcap = self.config.logit_softcap
        if softcap is None:
            out = F.scaled_dot_product_attention(
                queries.transpose(1, 2).float(),
                keys.transpose(1, 2).float(),
                values.transpose(1, 2).float(),
                attn_mask=visible[:, None],  # [B, 1, max_queries, max_keys]
                scale=self.config.scaling,
                enable_gqa=self.config.num_heads != self.config.num_kv_heads,
            )  # [B, H, max_queries, D]
        else:
            out = _capped_attention(queries, keys, values, visible, self.config.scaling,
                                    softcap)
        out = out.transpose(1, 2).reshape(batch_size * max_queries, *q.shape[1:])
        if metadata.token_scatter is not None:
            out = out[metadata.token_scatter]
        return out.to(q.dtype)  # [T, H, D]

    def _windowed(
        self,
        visible: torch.Tensor,
        window: int,
        batch: ForwardBatch,
        metadata: TorchAttentionMetadata,
        num_keys: int,
    ) -> torch.Tensor:
        """``visible`` ``[B, Q, K]`` narrowed to the keys at positions ``> p - window``."""
        positions = batch.positions.to(torch.int64)
        batch_size, max_queries = visible.shape[0], metadata.max_queries
        if metadata.query_gather is None:
            query_pos = positions.view(batch_size, max_queries)
        else:
            query_pos = positions[metadata.query_gather].view(batch_size, max_queries)
        device = visible.device
        if metadata.own_tokens is not None:
            own_pos = positions[metadata.own_tokens]  # [B, own columns]
        else:  # DRAFT_DECODE: branch k's depth columns end at its query's position
            assert batch.draft_kv_slots is not None
            depth = batch.draft_kv_slots.shape[1]
            cols = torch.arange(max_queries * depth, device=device)
            own_pos = query_pos[:, cols // depth] - (depth - 1 - cols % depth)
        num_prefix = num_keys - own_pos.shape[1]
        prefix_pos = torch.arange(num_prefix, device=device).expand(batch_size, num_prefix)
        key_pos = torch.cat([prefix_pos, own_pos], dim=1)  # [B, K]
        inside = key_pos[:, None, :] > query_pos[:, :, None] - window  # [B, Q, K]
        visible = visible & inside
        # padded query rows (outputs dropped) keep a key, so no softmax row is empty
        return visible | ~visible.any(dim=-1, keepdim=True)


def _capped_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    visible: torch.Tensor,
    scaling: float,
    softcap: float,
) -> torch.Tensor:
    """Soft-capped softmax attention in float32: ``queries`` ``[B, Q, H, D]``,
    ``keys``/``values`` ``[B, K, H_kv, D]``, ``visible`` ``[B, Q, K]``; ``[B, H, Q, D]``."""
    q = queries.transpose(1, 2).float()  # [B, H, Q, D]
    group = q.shape[1] // keys.shape[2]
    k = keys.transpose(1, 2).float().repeat_interleave(group, dim=1)  # [B, H, K, D]
    v = values.transpose(1, 2).float().repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling
    scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)
