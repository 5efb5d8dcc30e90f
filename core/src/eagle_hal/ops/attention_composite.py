"""Tree verification for backends whose attention kernels take no custom mask.

A verify query (tree node ``i`` of a request) sees two disjoint key sets: the request's
whole cached prefix, and the tree nodes the tree mask allows. Softmax attention over a union
of disjoint key sets is recovered exactly from attention over each set, provided each part
also returns its log-sum-exp. So TARGET_VERIFY becomes:

1. ``paged_prefix_attention``: N queries per request over the paged prefix, no mask beyond
   the prefix length: what a paged prefill/decode kernel computes, if it returns the LSE;
2. ``dense_tree_attention``: the N x N tree block, dense and tiny;
3. ``merge_attention_states``: the exact combination.

Conventions: the LSE is the *natural* log of the sum of ``exp(scaling * q . k)`` over the
part's visible keys, ``[..., H]`` in float32; a part with no visible key has LSE ``-inf``
and output 0, and merging with it is the identity. Every function here computes in float32
and returns float32; callers cast.

Sliding windows and soft-capping (``AttentionConfig``): every function takes the score
cap (``softcap``); the prefix and tree parts take a layer's ``window`` with the query
positions (and, for the tree, the key nodes' positions), and drop the keys at positions
``<= p - window``, a prefix slot's position being its column.

``CompositeTreeAttentionBackend`` runs TARGET_VERIFY this way and hands every other mode to
an inner backend. A vendor backend subclasses it and overrides ``prefix_attention`` /
``tree_attention`` with its kernels; the defaults are the torch functions below.
"""

from __future__ import annotations

import dataclasses

import torch

from eagle_hal.hal.attention import (
    AttentionBackend,
    AttentionConfig,
    AttentionMetadata,
    ForwardBatch,
    ForwardMode,
)
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.attention_reference import (
    TorchAttentionBackend,
    decode_tree_mask,
    gather_kv_slots,
)

__all__ = [
    "CompositeTreeAttentionBackend",
    "CompositeVerifyMetadata",
    "dense_tree_attention",
    "masked_attention_with_lse",
    "merge_attention_states",
    "paged_prefix_attention",
]


def masked_attention_with_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    visible: torch.Tensor,
    scaling: float,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention under a bool mask, with its log-sum-exp; with ``softcap`` each
    score ``s`` is ``softcap * tanh(s / softcap)`` first.

    ``q`` ``[B, Q, H, D]``, ``k``/``v`` ``[B, K, H_kv, D]`` (``H`` a multiple of ``H_kv``;
    query head ``h`` reads KV head ``h // (H / H_kv)``), ``visible`` ``[B, Q, K]``. Returns
    ``out`` ``[B, Q, H, D]`` and ``lse`` ``[B, Q, H]``, float32; rows with no visible key give
    ``out = 0`` and ``lse = -inf``.
    """
    batch_size, num_queries, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    group = num_heads // num_kv_heads
    # [B, H_kv, group * Q, D]: the queries of one KV head side by side
    queries = q.float().view(batch_size, num_queries, num_kv_heads, group, head_dim)
    queries = queries.permute(0, 2, 3, 1, 4).reshape(batch_size, num_kv_heads, -1, head_dim)
    keys = k.float().transpose(1, 2)  # [B, H_kv, K, D]
    values = v.float().transpose(1, 2)
    scores = torch.matmul(queries, keys.transpose(-1, -2)) * scaling  # [B, H_kv, group*Q, K]
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    mask = visible[:, None, None].expand(batch_size, num_kv_heads, group, num_queries, -1)
    scores = scores.masked_fill(~mask.reshape(scores.shape), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)  # [B, H_kv, group*Q, 1]
    finite_lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    weights = torch.exp(scores - finite_lse)  # exp(-inf) = 0 where masked
    out = torch.matmul(weights, values)  # [B, H_kv, group*Q, D]
    out = out.view(batch_size, num_kv_heads, group, num_queries, head_dim)
    out = out.permute(0, 3, 1, 2, 4).reshape(batch_size, num_queries, num_heads, head_dim)
    lse = lse.view(batch_size, num_kv_heads, group, num_queries)
    lse = lse.permute(0, 3, 1, 2).reshape(batch_size, num_queries, num_heads)
    return out, lse


def paged_prefix_attention(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    *,
    req_to_token: torch.Tensor,
    table_rows: torch.Tensor,
    prefix_lens: torch.Tensor,
    max_prefix_len: int,
    scaling: float,
    kv_order: str = "NHD",
    softcap: float | None = None,
    window: int | None = None,
    query_positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every query of request ``b`` over the slots ``req_to_token[row_b, 0:prefix_lens[b]]``
    (with ``window``, only the columns ``> query_positions - window``, ``query_positions``
    ``[B, Q]``).

    ``q`` ``[B, Q, H, D]``; ``k_buffer``/``v_buffer`` one layer's storage in ``kv_order``;
    ``table_rows`` and ``prefix_lens`` ``[B]`` on the device; ``max_prefix_len`` a host
    bound on ``prefix_lens`` (no device-to-host read). Returns ``(out [B, Q, H, D], lse
    [B, Q, H])`` in float32; a request with an empty prefix gets 0 and ``-inf``.
    """
    device = q.device
    cols = torch.arange(max_prefix_len, device=device)  # [P]
    valid = cols[None, :] < prefix_lens.to(torch.int64)[:, None]  # [B, P]
    rows = table_rows.to(torch.int64)[:, None]
    slots = req_to_token[rows, cols[None, :]].to(torch.int64)
    slots = torch.where(valid, slots, torch.zeros_like(slots))  # [B, P], padding -> slot 0
    keys = gather_kv_slots(k_buffer, slots, kv_order)  # [B, P, H_kv, D]
    values = gather_kv_slots(v_buffer, slots, kv_order)
    visible = valid[:, None, :].expand(q.shape[0], q.shape[1], max_prefix_len)
    if window is not None:
        if query_positions is None:
            raise ValueError("a windowed prefix attention needs the query positions")
        inside = cols[None, None, :] > query_positions.to(torch.int64)[:, :, None] - window
        visible = visible & inside
    return masked_attention_with_lse(q, keys, values, visible, scaling, softcap)


def dense_tree_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tree_mask: torch.Tensor,
    scaling: float,
    softcap: float | None = None,
    window: int | None = None,
    positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each request's N tree queries over its N tree keys under ``tree_mask``.

    ``q`` ``[B, N, H, D]``, ``k``/``v`` ``[B, N, H_kv, D]``, ``tree_mask`` bool ``[B, N, N]``
    (row ``i`` sees column ``j``); with ``window``, node ``i`` sees node ``j`` only if
    ``positions[j] > positions[i] - window`` (``positions`` ``[B, N]``). Returns
    ``(out [B, N, H, D], lse [B, N, H])``, float32.
    """
    if window is not None:
        if positions is None:
            raise ValueError("a windowed tree attention needs the nodes' positions")
        pos = positions.to(torch.int64)
        tree_mask = tree_mask & (pos[:, None, :] > pos[:, :, None] - window)
    return masked_attention_with_lse(q, k, v, tree_mask, scaling, softcap)


def merge_attention_states(
    out_a: torch.Tensor,
    lse_a: torch.Tensor,
    out_b: torch.Tensor,
    lse_b: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over the union of two disjoint key sets, from each set's result.

    ``out_*`` ``[..., H, D]``, ``lse_*`` ``[..., H]`` (natural log). Returns ``(out, lse)``
    with ``lse = log(exp(lse_a) + exp(lse_b))`` and ``out`` the LSE-weighted mean, float32.
    Both parts empty (``-inf``) gives 0 and ``-inf``.
    """
    lse_a, lse_b = lse_a.float(), lse_b.float()
    lse = torch.logaddexp(lse_a, lse_b)
    finite_lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    weight_a = torch.exp(lse_a - finite_lse)[..., None]  # 0 where lse_a = -inf
    weight_b = torch.exp(lse_b - finite_lse)[..., None]
    return weight_a * out_a.float() + weight_b * out_b.float(), lse


@dataclasses.dataclass
class CompositeVerifyMetadata(AttentionMetadata):
    """TARGET_VERIFY metadata of ``CompositeTreeAttentionBackend``."""

    tree_mask: torch.Tensor  # [B, N, N] bool
    num_draft_tokens: int
    max_prefix_len: int


class CompositeTreeAttentionBackend(AttentionBackend):
    """TARGET_VERIFY as prefix attention + dense tree attention + LSE merge; every other
    mode goes to ``inner`` (default: a ``TorchAttentionBackend`` over the same config).

    Accepts the ``TREE_BLOCK`` and ``BIT_PACKED`` layouts (the prefix is entirely visible
    in both, as the composite assumes); ``FULL`` is refused.
    """

    def __init__(
        self,
        config: AttentionConfig,
        inner: AttentionBackend | None = None,
        tree_mask_mode: str = TreeMaskMode.TREE_BLOCK,
    ) -> None:
        super().__init__(config)
        if tree_mask_mode not in (TreeMaskMode.TREE_BLOCK, TreeMaskMode.BIT_PACKED):
            raise ValueError(
                f"the composite verify path reads tree_block or bit_packed masks, not "
                f"{tree_mask_mode!r} (its prefix is always fully visible)"
            )
        self.tree_mask_mode = tree_mask_mode
        self.inner = inner if inner is not None else TorchAttentionBackend(config)

    def plan(self, batch: ForwardBatch) -> AttentionMetadata:
        """Decode the tree mask for TARGET_VERIFY; otherwise the inner backend's plan."""
        if batch.mode is not ForwardMode.TARGET_VERIFY:
            return self.inner.plan(batch)
        if batch.tree_mask is None:
            raise ValueError("target_verify needs batch.tree_mask")
        num_draft_tokens = batch.extend_lens_cpu[0] if batch.extend_lens_cpu else 0
        if any(n != num_draft_tokens for n in batch.extend_lens_cpu):
            raise ValueError(
                f"target_verify needs the same number of tree tokens per request, got "
                f"{batch.extend_lens_cpu}"
            )
        max_prefix_len = max(batch.prefix_lens_cpu, default=0)
        tree_mask, _ = decode_tree_mask(
            batch.tree_mask,
            self.tree_mask_mode,
            batch.prefix_lens_cpu,
            num_draft_tokens,
            max_prefix_len,
        )
        return CompositeVerifyMetadata(tree_mask, num_draft_tokens, max_prefix_len)

    def forward(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        """As ``AttentionBackend.forward``; TARGET_VERIFY via the composite, in float32."""
        if batch.mode is not ForwardMode.TARGET_VERIFY:
            return self.inner.forward(layer, q, k, v, batch)
        metadata = self.planned_metadata(batch, CompositeVerifyMetadata)
        store = self.config.kv_store
        store.write_kv(layer, batch.out_cache_loc, k, v)
        batch_size, n = batch.batch_size, metadata.num_draft_tokens
        queries = q.view(batch_size, n, *q.shape[1:])  # [B, N, H, D]
        prefix_out, prefix_lse = self.prefix_attention(layer, queries, batch, metadata)
        window = self.config.window(layer)
        # The tree keys are this forward's own k/v, rounded as the store keeps them.
        stored_dtype = store.k_buffer(layer).dtype
        tree_out, tree_lse = self.tree_attention(
            queries,
            k.to(stored_dtype).view(batch_size, n, *k.shape[1:]),  # [B, N, H_kv, D]
            v.to(stored_dtype).view(batch_size, n, *v.shape[1:]),
            metadata.tree_mask,
            # passed only when set: a subclass written before windows keeps its signature
            **({} if window is None else
               {"window": window, "positions": batch.positions.view(batch_size, n)}),
        )
        out, _ = merge_attention_states(prefix_out, prefix_lse, tree_out, tree_lse)
        return out.reshape(q.shape).to(q.dtype)  # [T, H, D]

    # -- overridable parts ---------------------------------------------------------------

    def prefix_attention(
        self,
        layer: int,
        q: torch.Tensor,
        batch: ForwardBatch,
        metadata: CompositeVerifyMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``q`` ``[B, N, H, D]`` over each request's cached prefix; ``(out, lse)``."""
        store = self.config.kv_store
        window = self.config.window(layer)
        positions = None
        if window is not None:
            positions = batch.positions.view(q.shape[0], q.shape[1])
        return paged_prefix_attention(
            q,
            store.k_buffer(layer),
            store.v_buffer(layer),
            req_to_token=self.config.req_to_token,
            table_rows=batch.table_rows,
            prefix_lens=batch.prefix_lens,
            max_prefix_len=metadata.max_prefix_len,
            scaling=self.config.scaling,
            kv_order=store.layout.order,
            softcap=self.config.logit_softcap,
            window=window,
            query_positions=positions,
        )

    def tree_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        tree_mask: torch.Tensor,
        window: int | None = None,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``q`` ``[B, N, H, D]`` over the tree block ``k``/``v`` ``[B, N, H_kv, D]``; with
        ``window``, ``positions`` ``[B, N]`` are the nodes' positions."""
        return dense_tree_attention(q, k, v, tree_mask, self.config.scaling,
                                    self.config.logit_softcap, window, positions)
