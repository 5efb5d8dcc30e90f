"""The thin layer between eagle-hal's contract and torch_npu's operators, as pure functions.

Each function turns something the core hands a backend (a request-to-token table, host
lengths, a tree mask, a KV buffer) into exactly what an Ascend operator reads, and nothing
else: no operator is called here, so every function is testable on any device.

What torch_npu's operators expect (from its API reference for
``npu_fused_infer_attention_score``, ``_npu_reshape_and_cache`` and ``NPUGraph``):

* Paged KV: a cache of ``[num_blocks, block_size, H_kv * D]`` (the "BSH" paged form) plus
  ``block_table`` int32 ``[B, max_blocks]`` listing each request's blocks in order and
  ``actual_seq_lengths_kv`` (host integers) giving each request's KV length. With more
  than one query token per request, the block size must be 128.
* ``atten_mask``: bool/int8/uint8 where **true means "do not attend"** (the opposite of
  torch's SDPA bool mask). ``sparse_mode=3`` (causal aligned to the bottom-right of each
  request's query/KV rectangle) takes a fixed 2048 x 2048 upper-triangular mask.
* Cache locations (slots) are int32.
* ``NPUGraph.update(cpu_update_input=[...])`` takes one dict per captured operator that
  reads host-side lengths, in capture order, keyed by the operator's parameter name.
"""

from __future__ import annotations

import torch
from eagle_hal.plugin_api import page_table

__all__ = [
    "CAUSAL_MASK_SIZE",
    "MULTI_TOKEN_BLOCK_SIZE",
    "SLOT_DTYPE",
    "block_table",
    "compressed_causal_mask",
    "graph_update_payload",
    "kv_lengths",
    "paged_cache_view",
    "to_npu_slots",
    "tree_verify_mask",
]

MULTI_TOKEN_BLOCK_SIZE = 128  # the block size the fused operator needs for query length > 1
CAUSAL_MASK_SIZE = 2048  # side of the compressed causal mask sparse_mode 3 takes
SLOT_DTYPE = torch.int32  # cache locations and block tables are int32 on Ascend


def to_npu_slots(slots: torch.Tensor) -> torch.Tensor:
    """``slots`` (any integer dtype, any shape) as the contiguous int32 the NPU ops read."""
    return slots.to(SLOT_DTYPE).contiguous()


def paged_cache_view(buffer: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of one layer's NHD storage ``[num_slots, H_kv, D]`` for the two NPU operators.

    Returns ``(blocks, flat_blocks)``: ``blocks`` ``[num_blocks, block_size, H_kv, D]`` (what
    ``_npu_reshape_and_cache`` writes) and ``flat_blocks`` ``[num_blocks, block_size,
    H_kv * D]`` (what the fused attention reads). Both alias ``buffer``; raises
    ``ValueError`` when it is not contiguous or not a whole number of blocks.
    """
    if buffer.dim() != 3:
        raise ValueError(f"expected NHD storage [num_slots, H_kv, D], got {tuple(buffer.shape)}")
    num_slots, num_kv_heads, head_dim = buffer.shape
    if num_slots % block_size:
        raise ValueError(f"{num_slots} slots are not a whole number of {block_size}-slot blocks")
    if not buffer.is_contiguous():
        raise ValueError("the NPU operators need contiguous KV storage")
    blocks = buffer.view(num_slots // block_size, block_size, num_kv_heads, head_dim)
    return blocks, buffer.view(num_slots // block_size, block_size, num_kv_heads * head_dim)


def block_table(
    req_to_token: torch.Tensor,
    table_rows: torch.Tensor,
    max_kv_len: int,
    block_size: int,
) -> torch.Tensor:
    """Each request's blocks in logical order: int32 ``[B, ceil(max_kv_len / block_size)]``.

    Relies on the engine's page invariant: position ``p`` of a request lives at slot
    ``pages[p // block_size] * block_size + p % block_size``, so the block of logical block
    ``i`` is ``req_to_token[row, i * block_size] // block_size``. Entries past a request's
    own length hold whatever the table holds there; the operator reads only
    ``ceil(kv_len / block_size)`` of them. No device-to-host read.
    """
    num_blocks = max(1, -(-max_kv_len // block_size))
    return page_table(req_to_token, table_rows, num_blocks, block_size)


def kv_lengths(prefix_lens: tuple[int, ...], extend_lens: tuple[int, ...]) -> list[int]:
    """Host KV lengths (``actual_seq_lengths_kv``): cached prefix plus this forward's tokens."""
    if len(prefix_lens) != len(extend_lens):
        raise ValueError(f"{len(prefix_lens)} prefix lengths but {len(extend_lens)} extend lengths")
    return [p + e for p, e in zip(prefix_lens, extend_lens, strict=True)]


def compressed_causal_mask(device: torch.device | str | None = None) -> torch.Tensor:
    """The 2048 x 2048 bool mask ``sparse_mode=3`` takes: true above the diagonal."""
    ones = torch.ones(CAUSAL_MASK_SIZE, CAUSAL_MASK_SIZE, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=1)


def tree_verify_mask(
    tree_block: torch.Tensor, prefix_lens: tuple[int, ...], kv_width: int
) -> torch.Tensor:
    """A verify tree as an explicit ``atten_mask`` for ``sparse_mode`` 0 or 1.

    ``tree_block`` bool ``[B, N, N]`` (true: node ``i`` sees node ``j``) for trees whose
    node ``j`` sits at KV position ``prefix_lens[b] + j``. Returns bool ``[B, 1, N,
    kv_width]`` in the NPU convention (true: masked): the prefix visible, tree columns
    masked where the tree says so, everything past ``prefix + N`` masked.
    """
    batch_size, n, _ = tree_block.shape
    if len(prefix_lens) != batch_size:
        raise ValueError(f"{len(prefix_lens)} prefix lengths for a batch of {batch_size}")
    if kv_width < max(prefix_lens, default=0) + n:
        raise ValueError(f"kv_width {kv_width} < longest prefix + N = {max(prefix_lens) + n}")
    device = tree_block.device
    columns = torch.arange(kv_width, device=device)  # [kv_width]
    prefix = torch.tensor(prefix_lens, device=device, dtype=torch.int64)[:, None]  # [B, 1]
    node = columns[None, :] - prefix  # [B, kv_width] tree node of each column (<0: prefix)
    in_tree = (node >= 0) & (node < n)
    gathered = torch.gather(  # [B, N, kv_width]: tree_block[b, i, node] where in the tree
        tree_block.to(torch.bool),
        2,
        node.clamp(0, n - 1)[:, None, :].expand(batch_size, n, kv_width),
    )
    visible = (node[:, None, :] < 0) | (in_tree[:, None, :] & gathered)
    return (~visible)[:, None]  # [B, 1, N, kv_width]


def graph_update_payload(
    kv_lens: list[int],
    num_attention_calls: int,
    padded_batch_size: int | None = None,
    query_lens: list[int] | None = None,
) -> list[dict[str, list[int]]]:
    """``cpu_update_input`` for ``NPUGraph.update``: one ``{"actual_seq_lengths_kv": ...}``
    per captured fused-attention call (one per layer for a model forward), in capture order,
    with ``"actual_seq_lengths"`` too when ``query_lens`` is given (multi-token queries).

    A graph captured for ``padded_batch_size`` rows gets the real lengths followed by 1 for
    each padding row: a padding row then reads one slot of block 0 (the engine's padding
    page) rather than relying on how the operator treats an empty KV row.
    """
    if num_attention_calls < 1:
        raise ValueError("a captured forward has at least one attention call")
    lengths = list(kv_lens)
    queries = None if query_lens is None else list(query_lens)
    if queries is not None and len(queries) != len(lengths):
        raise ValueError(f"{len(queries)} query lengths for {len(lengths)} KV lengths")
    if padded_batch_size is not None:
        if padded_batch_size < len(lengths):
            raise ValueError(f"padded batch {padded_batch_size} < real batch {len(lengths)}")
        padding = padded_batch_size - len(lengths)
        lengths += [1] * padding
        if queries is not None:
            queries += [1] * padding
    entry = {"actual_seq_lengths_kv": lengths}
    if queries is not None:
        entry["actual_seq_lengths"] = queries
    return [{name: list(values) for name, values in entry.items()}
            for _ in range(num_attention_calls)]
