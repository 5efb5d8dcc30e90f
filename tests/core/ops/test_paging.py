"""page_table and paged_view against the engine's integer page table and explicit indexing."""

from __future__ import annotations

import random

import pytest
import torch
from eagle_hal.engine.kv_cache import DeviceTokenTable, PageAllocator, RequestTokenTable
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal.ops.paging import page_table, paged_view


def test_page_table_lists_each_requests_pages_in_order():
    """Row b, column i is the i-th page the integer table gave request b; int32."""
    rng = random.Random(0)
    allocator = PageAllocator(num_pages=64, page_size=16)
    table = RequestTokenTable(allocator, max_requests=5, max_context=256)
    rows, lengths = [table.add_request() for _ in range(4)], [1, 16, 17, 90]
    for step in range(1, 6):  # interleaved growth: no request's pages are contiguous
        for row, n in zip(rows, lengths, strict=True):
            if rng.random() < 0.6 or step == 5:
                table.reserve(row, max(table.length(row), step * n // 5))
    device_table = DeviceTokenTable(table, KVLayout(page_size=16), "cpu")
    device_table.sync()
    got = page_table(device_table.tensor, torch.tensor(rows[::-1]), 6, 16)
    assert got.dtype == torch.int32 and got.shape == (4, 6)
    for b, row in enumerate(rows[::-1]):
        pages = list(table.pages(row))
        assert got[b, : len(pages)].tolist() == pages


def test_paged_view_aliases_the_storage():
    """Slot s of the storage is page s // P, offset s % P of the view, the same memory."""
    storage = torch.randn(64, 2, 8)
    view = paged_view(storage, 16)
    assert view.shape == (4, 16, 2, 8) and view.data_ptr() == storage.data_ptr()
    for slot in (0, 17, 63):
        assert torch.equal(view[slot // 16, slot % 16], storage[slot])
    with pytest.raises(ValueError, match="whole number"):
        paged_view(storage, 24)
    with pytest.raises(ValueError, match="contiguous"):
        paged_view(storage.transpose(0, 1).contiguous().transpose(0, 1), 16)
