"""Page tables and paged views of the KV store, for vendor kernels that read pages.

Vendor paged-attention operators take the cache as ``[num_pages, page_size, ...]`` plus a
table listing each request's pages in order (a block or page table). The engine keeps
slots instead: a request's position ``p`` lives at ``req_to_token[row, p]``. The page
invariant of the engine's allocator (``engine.page_allocator``) makes the two equivalent:
position ``p`` lives at slot ``pages[p // page_size] * page_size + p % page_size``, so the
page of a request's logical page ``i`` is ``req_to_token[row, i * page_size] // page_size``.

Both functions are pure tensor code with no device-to-host read, so they run inside a
captured graph and on any device.
"""

from __future__ import annotations

import torch

__all__ = ["page_table", "paged_view"]


def page_table(
    req_to_token: torch.Tensor,
    table_rows: torch.Tensor,
    num_pages: int,
    page_size: int,
) -> torch.Tensor:
    """Each request's first ``num_pages`` pages in logical order: int32 ``[B, num_pages]``.

    ``req_to_token`` ``[max_requests, max_context]`` slots; ``table_rows`` ``[B]`` its
    rows. Entries past a request's own length hold whatever the table holds there (a stale
    or padding page), never an out-of-range one: a kernel that reads only
    ``ceil(kv_len / page_size)`` of them never sees the difference.
    """
    if num_pages < 1 or page_size < 1:
        raise ValueError(f"num_pages and page_size must be >= 1, got {num_pages}, {page_size}")
    first_positions = torch.arange(num_pages, device=req_to_token.device) * page_size
    first_positions = first_positions.clamp(max=req_to_token.shape[1] - 1)
    rows = table_rows.to(torch.int64)[:, None]
    first_slots = req_to_token[rows, first_positions[None, :]].to(torch.int64)  # [B, pages]
    return (first_slots // page_size).to(torch.int32).contiguous()


def paged_view(buffer: torch.Tensor, page_size: int) -> torch.Tensor:
    """One layer's NHD storage ``[num_slots, H_kv, D]`` as ``[num_pages, page_size, H_kv,
    D]``: a view (the same memory), so a kernel reading it sees every write to the store.

    Raises ``ValueError`` when ``buffer`` is not three-dimensional, not contiguous, or not a
    whole number of pages.
    """
    if buffer.dim() != 3:
        raise ValueError(f"expected NHD storage [num_slots, H_kv, D], got {tuple(buffer.shape)}")
    num_slots, num_kv_heads, head_dim = buffer.shape
    if num_slots % page_size:
        raise ValueError(f"{num_slots} slots are not a whole number of {page_size}-slot pages")
    if not buffer.is_contiguous():
        raise ValueError("a paged view needs contiguous KV storage")
    return buffer.view(num_slots // page_size, page_size, num_kv_heads, head_dim)
